// A file rewritten with the same size within the same second as the last mirror (the state going
// from "running" to "finished", a PBT trial's new params.json) reaches the mirror and comes back
// in a download: rsync's quick check compares modification times to the nanosecond, and the
// state snapshot is always copied.
#include <fcntl.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <thread>

#include "fake_executor.hpp"
#include "sync/upload.hpp"
#include "util/fs.hpp"

using namespace tune;
using testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

// Writes `text` to `p` with the modification time `sec`.`nsec`.
void put_at(const fs::path& p, const std::string& text, time_t sec, long nsec) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  timespec times[2] = {{sec, nsec}, {sec, nsec}};
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
}

std::string text_of(const fs::path& p) {
  auto t = util::read_file(p);
  return t ? *t : std::string("<missing>");
}

void mirror_now(sync::Uploader& u) {
  u.request(true);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (u.poll()) {
    REQUIRE(std::chrono::steady_clock::now() < end);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(u.failures() == 0);
}

// Sleeps until just after the wall clock's next whole second, so that what follows for the
// next few hundred milliseconds happens within one second.
void align_to_second() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::this_thread::sleep_until(ceil<seconds>(now) + milliseconds(5));
}

}  // namespace

TEST_CASE("a file:// mirror takes in files rewritten with the same size in the same second",
          "[upload][quick_check]") {
  ScratchDir d;
  fs::path exp = d.path / "exp";
  fs::path mirror = d.path / "mirror";
  spec::SyncConfig cfg;
  cfg.upload_dir = "file://" + mirror.string();
  const time_t sec = 1'700'000'000;
  fs::path params = exp / "trial_00000" / "params.json";
  put_at(params, "{\"lr\": 0.1}\n", sec, 100);

  align_to_second();
  put_at(exp / "experiment_state.json", "{\"phase\": \"running\"}\n", sec, 0);
  sync::Uploader u(exp, "exp", cfg);
  mirror_now(u);
  REQUIRE(text_of(mirror / "exp" / "trial_00000" / "params.json") == "{\"lr\": 0.1}\n");
  auto first_snapshot = fs::last_write_time(exp / ".tune" / "upload" / "experiment_state.json");

  // Same sizes; params.json's time differs from the copy's in nanoseconds only.
  put_at(params, "{\"lr\": 0.7}\n", sec, 900);
  put_at(exp / "experiment_state.json", "{\"phase\": \"finishd\"}\n", sec, 0);
  mirror_now(u);
  CHECK(text_of(mirror / "exp" / "trial_00000" / "params.json") == "{\"lr\": 0.7}\n");
  CHECK(text_of(mirror / "exp" / "experiment_state.json") == "{\"phase\": \"finishd\"}\n");
  auto second_snapshot = fs::last_write_time(exp / ".tune" / "upload" / "experiment_state.json");
  using std::chrono::floor, std::chrono::seconds;
  if (floor<seconds>(first_snapshot) != floor<seconds>(second_snapshot))
    WARN(
        "the two state snapshots fell in different seconds (a slow machine): the state's "
        "same-second case was not exercised this time");

  // A download into a dir holding an older copy takes the newer one the same way.
  fs::path back = d.path / "back";
  put_at(back / "trial_00000" / "params.json", "{\"lr\": 0.3}\n", sec, 500);
  REQUIRE(sync::Uploader::download(back, "exp", cfg));
  CHECK(text_of(back / "trial_00000" / "params.json") == "{\"lr\": 0.7}\n");
}
