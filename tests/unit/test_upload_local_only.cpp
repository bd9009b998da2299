// What stays with the experiment dir where it is (sync::kLocalOnlyDirs: pending `tune stop
// --trial` requests, the callbacks' output): a file:// mirror (real rsync) leaves them out, a
// download leaves an older mirror's copies behind, and a custom syncer's are removed.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <thread>

#include "fake_executor.hpp"
#include "sync/upload.hpp"

using namespace tune;
using testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// An experiment dir as a driver leaves it, with a pending stop request and callback output.
void make_experiment(const fs::path& exp) {
  put(exp / "experiment_state.json", "{}\n");
  put(exp / "trial_00000_x=1" / "result.json", "{\"loss\": 1}\n");
  put(exp / ".tune" / "stop_requests" / "00000", "stop\n");
  put(exp / ".tune" / "callbacks" / "1.stdout", "{\"event\": \"trial_start\"}\n");
}

void mirror_now(sync::Uploader& u) {
  u.request(true);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (u.poll()) {
    REQUIRE(std::chrono::steady_clock::now() < end);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

TEST_CASE("is_local_only: the stop requests and callbacks dirs of .tune, and what they hold",
          "[upload][local_only]") {
  CHECK(sync::is_local_only(".tune/stop_requests"));
  CHECK(sync::is_local_only(".tune/stop_requests/00001"));
  CHECK(sync::is_local_only(".tune/callbacks/1.stderr"));
  CHECK_FALSE(sync::is_local_only(".tune"));
  CHECK_FALSE(sync::is_local_only(".tune/state.journal"));
  CHECK_FALSE(sync::is_local_only("trial_00000/.tune/callbacks"));
  CHECK_FALSE(sync::is_local_only("callbacks"));
  CHECK_FALSE(sync::is_local_only(""));
}

TEST_CASE("a file:// mirror and its download leave the local-only dirs out",
          "[upload][local_only]") {
  ScratchDir d;
  fs::path exp = d.path / "results" / "exp";
  fs::path mirror = d.path / "mirror";
  make_experiment(exp);
  spec::SyncConfig cfg;
  cfg.upload_dir = "file://" + mirror.string();
  {
    sync::Uploader u(exp, "exp", cfg);
    mirror_now(u);
  }
  CHECK(fs::exists(mirror / "exp" / "experiment_state.json"));
  CHECK(fs::exists(mirror / "exp" / "trial_00000_x=1" / "result.json"));
  CHECK(fs::is_directory(mirror / "exp" / ".tune"));
  CHECK_FALSE(fs::exists(mirror / "exp" / ".tune" / "stop_requests"));
  CHECK_FALSE(fs::exists(mirror / "exp" / ".tune" / "callbacks"));

  // A mirror an older tune made holds them: a download (resume, --restore-from) leaves them.
  put(mirror / "exp" / ".tune" / "stop_requests" / "00000", "stop\n");
  put(mirror / "exp" / ".tune" / "callbacks" / "1.stdout", "old\n");
  fs::path back = d.path / "results" / "back";
  REQUIRE(sync::Uploader::download(back, "exp", cfg));
  CHECK(fs::exists(back / "experiment_state.json"));
  CHECK(fs::exists(back / "trial_00000_x=1" / "result.json"));
  CHECK_FALSE(fs::exists(back / ".tune" / "stop_requests"));
  CHECK_FALSE(fs::exists(back / ".tune" / "callbacks"));
}

TEST_CASE("a custom upload_syncer's download has the local-only dirs removed",
          "[upload][local_only]") {
  ScratchDir d;
  fs::path mirror = d.path / "mirror";
  make_experiment(mirror / "exp");  // the syncer copies whatever the mirror holds
  spec::SyncConfig cfg;
  cfg.upload_dir = mirror.string();
  cfg.upload_syncer = "cp -r {source}. {target}";
  fs::path back = d.path / "back";
  REQUIRE(sync::Uploader::download(back, "exp", cfg));
  CHECK(fs::exists(back / "trial_00000_x=1" / "result.json"));
  CHECK(fs::exists(back / "experiment_state.json"));
  CHECK_FALSE(fs::exists(back / ".tune" / "stop_requests"));
  CHECK_FALSE(fs::exists(back / ".tune" / "callbacks"));
}
