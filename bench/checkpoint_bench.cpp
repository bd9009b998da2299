// Checkpoint benchmarks (run by bench/bench.py; not a test):
//   1. registering a 1 GiB checkpoint on the same filesystem (checkpoint::adopt: a rename),
//      against copying the same directory (what a copy-based design would pay);
//   2. retention over 10,000 checkpoints of one trial (keep 5 best by a random score): the cost
//      of the first 1,000 registrations against the last 1,000 (flat = independent of n).
// Prints one JSON object.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "checkpoint/adopt.hpp"
#include "checkpoint/retention.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int main(int argc, char** argv) {
  fs::path root = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "tune-ckpt-bench";
  fs::remove_all(root);
  fs::create_directories(root / "trial");
  // 1. a 1 GiB checkpoint: 4 files of 256 MiB, allocated (not sparse)
  fs::path src = root / "trial" / ".ckpt_tmp";
  fs::create_directories(src);
  for (int i = 0; i < 4; ++i) {
    int fd = ::open((src / ("shard" + std::to_string(i))).c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || ::posix_fallocate(fd, 0, 256ll << 20) != 0) {
      std::fprintf(stderr, "cannot allocate 1 GiB under %s\n", root.c_str());
      return 1;
    }
    ::close(fd);
  }
  auto t0 = Clock::now();
  auto r = tune::checkpoint::adopt(src.string(), root, root / "trial", "checkpoint_000001");
  double adopt_ms = ms_since(t0);
  if (!r) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 1;
  }
  t0 = Clock::now();
  fs::copy(root / "trial" / "checkpoint_000001", root / "copy", fs::copy_options::recursive);
  ::sync();
  double copy_ms = ms_since(t0);
  fs::remove_all(root);

  // 2. retention at scale
  tune::checkpoint::Policy policy{5, std::string("loss"), tune::spec::Order::kMin};
  std::vector<tune::trial::Checkpoint> kept;
  std::mt19937_64 rng(1);
  const int n = 10000;
  double first = 0, last = 0;
  size_t deleted = 0;
  for (int i = 1; i <= n; ++i) {
    auto s = Clock::now();
    tune::trial::Checkpoint c;
    c.seq = i;
    c.iteration = i;
    c.metrics = {{"loss", static_cast<double>(rng() % 100000) / 1000.0}};
    kept.push_back(std::move(c));
    auto doomed = tune::checkpoint::select_for_deletion(kept, policy, true);
    std::erase_if(kept, [&](const auto& k) {
      return std::binary_search(doomed.begin(), doomed.end(), k.seq);
    });
    deleted += doomed.size();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - s).count();
    if (i <= 1000) first += us;
    if (i > n - 1000) last += us;
  }
  std::printf(
      "{\"adopt_1gib_ms\": %.3f, \"copy_1gib_ms\": %.1f, \"retention_first_1000_us_each\": %.3f, "
      "\"retention_last_1000_us_each\": %.3f, \"retained\": %zu, \"deleted\": %zu}\n",
      adopt_ms, copy_ms, first / 1000, last / 1000, kept.size(), deleted);
  return 0;
}
