// A helper that stalls (a dead network, a stuck S3 server) is killed after its timeout: a
// download from upload_dir never holds `tune run --resume=auto` for ever.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <string>

#include "fake_executor.hpp"
#include "sync/upload.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

using namespace tune;
using testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Whether `pid` still names a live (not zombie) process.
bool alive(const std::string& pid) {
  auto stat = util::read_file("/proc/" + pid + "/stat", 4096);
  if (!stat) return false;
  auto close = stat->rfind(')');
  return close != std::string::npos && stat->substr(close + 2, 1) != "Z";
}

}  // namespace

TEST_CASE("run_process kills a helper, and what it started, once its timeout passes",
          "[process][timeout]") {
  ScratchDir d;
  fs::path pidfile = d.path / "grandchild";
  auto t0 = std::chrono::steady_clock::now();
  auto rc = util::run_process({"sh", "-c", "sleep 30 & echo $! > '" + pidfile.string() + "'; wait"},
                              d.path / "log", 0.3);
  REQUIRE_FALSE(rc);
  CHECK(rc.error().message.find("ran longer than 0.3 s: killed") != std::string::npos);
  CHECK(seconds_since(t0) < 10);
  auto pid = util::read_file(pidfile, 64);
  REQUIRE(pid);
  while (!pid->empty() && pid->back() == '\n') pid->pop_back();
  // The whole process group went: the grandchild's kill may take a moment to land.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (alive(*pid) && std::chrono::steady_clock::now() < until) {
  }
  CHECK_FALSE(alive(*pid));
}

TEST_CASE("run_process with a timeout returns the status of a helper that ends in time",
          "[process][timeout]") {
  ScratchDir d;
  auto rc = util::run_process({"sh", "-c", "exit 3"}, d.path / "log", 5);
  REQUIRE(rc);
  CHECK(*rc == 3);
}

TEST_CASE("a download that stalls is killed after sync_timeout, tried three times, then refused",
          "[upload][timeout]") {
  ScratchDir d;
  spec::SyncConfig cfg;
  cfg.upload_dir = (d.path / "mirror").string();
  cfg.upload_syncer = "sh -c 'sleep 30' {source} {target}";
  cfg.sync_timeout = 0.3;
  auto t0 = std::chrono::steady_clock::now();
  auto r = sync::Uploader::download(d.path / "exp", "exp", cfg);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("cannot download the experiment from") != std::string::npos);
  CHECK(r.error().message.find("sync_timeout") != std::string::npos);
  CHECK(r.error().message.find("3 times") != std::string::npos);
  CHECK(seconds_since(t0) >= 0.9);
  CHECK(seconds_since(t0) < 20);
}
