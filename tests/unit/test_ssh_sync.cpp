// A remote trial's syncs as its host's I/O thread runs them (exec/ssh_run.hpp): which
// checkpoints a sync copies, and what becomes of a copy, queued or under way, of a checkpoint
// that retention dropped. The copies are stand-in processes (`sleep`): no host is needed.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "exec/ssh_executor.hpp"
#include "exec/ssh_run.hpp"
#include "fake_executor.hpp"
#include "util/process.hpp"

using namespace tune;
using exec::Run;
using testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

struct Sync {
  ScratchDir d;
  exec::SshOptions opts;
  exec::SshHost host;
  exec::SshStats stats;
  exec::SyncContext c{opts, host, stats};
  Run r;
  Sync() {
    opts.head_exp_dir = d.path;
    fs::create_directories(d.path / ".tune");
    r.id = "t1";
    r.head_dir = d.path / "trial_00000";
    fs::create_directories(r.head_dir);
  }
  ~Sync() { exec::drop_sync(r); }
  // A copy of `names` (one: under its own staging name; more: a batch), as a stand-in process.
  Run::Step copy_step(const std::vector<std::string>& names) {
    Run::Step s;
    s.cmd = {"sleep", "30"};
    if (names.size() == 1) {
      s.staging = r.head_dir / (".sync_" + names[0]);
      s.final_path = r.head_dir / names[0];
    } else {
      s.staging = r.head_dir / ".sync_checkpoint_batch";
      s.batch = names;
    }
    return s;
  }
  void start(Run::Step s) {
    if (!s.staging.empty()) fs::create_directories(s.staging);
    if (!s.staging.empty()) std::ofstream(s.staging / "weights.bin") << "partial";
    r.sync_pid = *util::spawn_process(s.cmd, d.path / ".tune" / "sync.log");
    r.current = std::move(s);
  }
};

bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0;
}

}  // namespace

TEST_CASE("a sync a checkpoint asks for copies the newest kept one only; a full sync all missing",
          "[ssh_sync]") {
  Sync s;
  s.r.checkpoints = {"checkpoint_000008", "checkpoint_000009", "checkpoint_000010"};
  fs::create_directories(s.r.head_dir / "checkpoint_000008");
  CHECK(exec::checkpoints_to_copy(s.r, false) == std::vector<std::string>{"checkpoint_000010"});
  CHECK(exec::checkpoints_to_copy(s.r, true) ==
        std::vector<std::string>{"checkpoint_000009", "checkpoint_000010"});
  fs::create_directories(s.r.head_dir / "checkpoint_000010");
  CHECK(exec::checkpoints_to_copy(s.r, false).empty());  // the newest is there already
  CHECK(exec::checkpoints_to_copy(s.r, true) == std::vector<std::string>{"checkpoint_000009"});
}

TEST_CASE("a checkpoint retention dropped stops its copy under way; the next copy starts",
          "[ssh_sync]") {
  Sync s;
  s.r.checkpoints = {"checkpoint_000002", "checkpoint_000003"};
  s.start(s.copy_step({"checkpoint_000002"}));
  pid_t first = s.r.sync_pid;
  s.r.sync_steps.push_back(s.copy_step({"checkpoint_000003"}));
  exec::drop_checkpoint(s.c, s.r, "checkpoint_000002");
  CHECK_FALSE(alive(first));                                          // killed and reaped
  CHECK_FALSE(fs::exists(s.r.head_dir / ".sync_checkpoint_000002"));  // its partial copy gone
  CHECK(s.r.checkpoints == std::set<std::string>{"checkpoint_000003"});
  REQUIRE(s.r.sync_pid > 0);
  CHECK(s.r.sync_pid != first);
  REQUIRE(s.r.current);
  CHECK(s.r.current->final_path.filename() == "checkpoint_000003");
  CHECK(s.r.sync_steps.empty());
}

TEST_CASE("a copy of several checkpoints goes on while retention keeps one of them", "[ssh_sync]") {
  Sync s;
  s.r.checkpoints = {"checkpoint_000004", "checkpoint_000005"};
  s.start(s.copy_step({"checkpoint_000004", "checkpoint_000005"}));
  pid_t pid = s.r.sync_pid;
  exec::drop_checkpoint(s.c, s.r, "checkpoint_000004");
  CHECK(alive(pid));
  CHECK(s.r.sync_pid == pid);
  REQUIRE(s.r.current);
  CHECK(s.r.current->batch == std::vector<std::string>{"checkpoint_000005"});
  exec::drop_checkpoint(s.c, s.r, "checkpoint_000005");  // none left worth copying
  CHECK_FALSE(alive(pid));
  CHECK(s.r.sync_pid <= 0);
  CHECK_FALSE(s.r.current);
  CHECK_FALSE(fs::exists(s.r.head_dir / ".sync_checkpoint_batch"));
}

TEST_CASE("a queued copy of a dropped checkpoint never starts; the files step stays",
          "[ssh_sync]") {
  Sync s;
  s.r.checkpoints = {"checkpoint_000006", "checkpoint_000007"};
  Run::Step files;
  files.cmd = {"sleep", "30"};
  s.start(s.copy_step({"checkpoint_000007"}));
  pid_t pid = s.r.sync_pid;
  s.r.sync_steps.push_back(s.copy_step({"checkpoint_000006"}));
  s.r.sync_steps.push_back(s.copy_step({"checkpoint_000005", "checkpoint_000006"}));
  s.r.sync_steps.push_back(files);
  exec::drop_checkpoint(s.c, s.r, "checkpoint_000006");
  CHECK(alive(pid));  // the copy under way is of another checkpoint
  REQUIRE(s.r.sync_steps.size() == 2);
  CHECK(s.r.sync_steps[0].batch == std::vector<std::string>{"checkpoint_000005"});
  CHECK(s.r.sync_steps[1].staging.empty());  // the files step
}

TEST_CASE("a dir of the trial dir that became a checkpoint seeds its copy on the head",
          "[ssh_sync]") {
  Sync s;
  s.r.dir = "/srv/tune/exp/trial_00000";
  auto on_head = [&](const std::string& rel) {
    fs::create_directories(s.r.head_dir / rel);
    std::ofstream(s.r.head_dir / rel / "weights.bin") << "w";
  };
  on_head("tmpabc");
  exec::seed_checkpoint(s.r, s.r.dir + "/tmpabc", "checkpoint_000001");
  CHECK_FALSE(fs::exists(s.r.head_dir / "tmpabc"));  // the stale copy is gone from the head
  CHECK(fs::exists(s.r.head_dir / ".sync_checkpoint_000001" / "weights.bin"));

  // Never a nested or hidden dir, one outside the trial dir, or one that is a symlink here.
  on_head("a/b");
  on_head(".hidden");
  fs::create_directory_symlink(s.r.head_dir / "a", s.r.head_dir / "link");
  exec::seed_checkpoint(s.r, s.r.dir + "/a/b", "checkpoint_000002");
  exec::seed_checkpoint(s.r, s.r.dir + "/.hidden", "checkpoint_000003");
  exec::seed_checkpoint(s.r, s.r.dir + "/link", "checkpoint_000004");
  exec::seed_checkpoint(s.r, "/srv/tune/exp/trial_000001/tmpabc", "checkpoint_000005");
  for (int i = 2; i <= 5; ++i)
    CHECK_FALSE(fs::exists(s.r.head_dir / (".sync_checkpoint_00000" + std::to_string(i))));
  CHECK(fs::exists(s.r.head_dir / "a" / "b"));

  // While a files step runs (it may be writing that copy), it waits for the next poll after.
  on_head("tmpdef");
  Run::Step files;
  files.cmd = {"sleep", "30"};
  s.start(files);
  exec::seed_checkpoint(s.r, s.r.dir + "/tmpdef", "checkpoint_000006");
  CHECK(fs::exists(s.r.head_dir / "tmpdef"));
  CHECK(s.r.seeds_later.size() == 1);
}

TEST_CASE("a seed of a checkpoint retention dropped leaves the head", "[ssh_sync]") {
  Sync s;
  s.r.checkpoints = {"checkpoint_000001"};
  fs::create_directories(s.r.head_dir / ".sync_checkpoint_000001");
  exec::drop_checkpoint(s.c, s.r, "checkpoint_000001");
  CHECK_FALSE(fs::exists(s.r.head_dir / ".sync_checkpoint_000001"));
}
