// Experiment-state benchmarks (run by bench/bench.py; not a test): loading and writing the
// experiment_state.json of an existing experiment (bench.py makes one of 10,000 trials).
// Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "state/state.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tune_bench_state EXPERIMENT_DIR [REPEAT]\n");
    return 2;
  }
  fs::path dir = argv[1];
  int repeat = argc > 2 ? std::stoi(argv[2]) : 11;
  std::vector<double> load, save, durable;
  tune::state::ExperimentState s;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    auto r = tune::state::load(dir);
    load.push_back(ms_since(t0));
    if (!r) {
      std::fprintf(stderr, "%s\n", r.error().message.c_str());
      return 1;
    }
    s = std::move(*r);
  }
  // Cold: every trial serialized (the first write of a run). Warm: the driver's steady state,
  // where between two writes a few trials (here 32, the running ones) made progress.
  std::vector<double> cold;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    if (!tune::state::save(dir, s, false)) return 1;
    cold.push_back(ms_since(t0));
  }
  tune::state::StateWriter writer;
  if (!writer.save(dir, s, false)) return 1;
  size_t touched = 0;
  for (int i = 0; i < repeat; ++i) {
    for (size_t k = 0; k < 32 && k < s.trials.size(); ++k) {
      auto& t = s.trials[(static_cast<size_t>(i) * 32 + k) % s.trials.size()];
      t.iteration += 1;
      t.stdout_offset += 64;
    }
    auto t0 = Clock::now();
    if (!writer.save(dir, s, false)) return 1;
    save.push_back(ms_since(t0));
    touched = writer.last_serialized();
    for (size_t k = 0; k < 32 && k < s.trials.size(); ++k)
      s.trials[(static_cast<size_t>(i) * 32 + k) % s.trials.size()].stdout_offset += 64;
    t0 = Clock::now();
    if (!writer.save(dir, s, true)) return 1;
    durable.push_back(ms_since(t0));
  }
  std::printf(
      "{\"trials\": %zu, \"state_bytes\": %llu, \"load_ms\": %.3f, \"save_ms\": %.3f, "
      "\"save_durable_ms\": %.3f, \"save_cold_ms\": %.3f, \"serialized_per_write\": %zu}\n",
      s.trials.size(),
      static_cast<unsigned long long>(tune::util::file_size_or_zero(dir / "experiment_state.json")),
      median(load), median(save), median(durable), median(cold), touched);
  return 0;
}
