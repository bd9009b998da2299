// The look for changes in a trial dir that an SSH sync starts with (exec/ssh_changes.hpp): its
// shell command, run here by /bin/sh as the host's kept shell runs it, and the same look made
// by tune-agent as an attempt ends (agent/dir_changes.hpp); its answer, read as from a hostile
// host; and the files written on the head from it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "agent/dir_changes.hpp"
#include "exec/ssh_changes.hpp"
#include "fake_executor.hpp"
#include "util/base64.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

using namespace tune;
using exec::Changes;
using testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

// The command's answer, as the kept shell gives it (stdout and stderr together).
std::string ask(const fs::path& dir, bool inline_files) {
  fs::path out = dir.parent_path() / "answer.txt";
  auto rc = util::run_process({"/bin/sh", "-c", exec::changes_command(dir.string(), inline_files)},
                              out, 30);
  REQUIRE(rc);
  auto text = util::read_file(out);
  REQUIRE(text);
  return *text;
}

// An ended attempt's look: by the shell command, or by the agent.
std::string look(const fs::path& dir, bool by_agent) {
  return by_agent ? agent::dir_changes(dir.string()) : ask(dir, true);
}

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A line of the listing for a changed file holding `data` ("n f SIZE MTIME MODE PATH"); the
// answer made of a listing and reads; a read of `data`.
std::string listed(const std::string& path, const std::string& data) {
  return "n f " + std::to_string(data.size()) + " 1764237600.5 644 " + path + "\n";
}
std::string answer(const std::string& listing, const std::string& reads = "") {
  std::string b64;
  util::base64_encode(listing, b64);
  return "files\n" + b64 + "\n" + reads;
}
std::string read_as(const std::string& data) {
  std::string b64;
  util::base64_encode(data, b64);
  return "F\n" + b64 + "\n";
}

}  // namespace

TEST_CASE("ssh changes: an ended attempt's few small files come with the look", "[ssh_changes]") {
  bool by_agent = GENERATE(false, true);
  CAPTURE(by_agent);
  ScratchDir d;
  fs::path t = d.path / "trial";
  put(t / "stdout.log", "{\"x\": 1}\n");
  // The first look marks the dir and takes all there is; the next, only what changed since.
  auto all = exec::parse_changes(look(t, by_agent));
  REQUIRE(all.kind == Changes::Kind::kFiles);
  REQUIRE(all.files.size() == 1);
  CHECK(all.files[0].path == "stdout.log");
  CHECK(all.files[0].data == "{\"x\": 1}\n");
  CHECK(all.files[0].changed);
  auto again = exec::parse_changes(look(t, by_agent));  // (listed, unchanged: nothing read)
  REQUIRE(again.kind == Changes::Kind::kFiles);
  REQUIRE(again.files.size() == 1);
  CHECK_FALSE(again.files[0].changed);
  CHECK(again.files[0].data.empty());
  ::usleep(20'000);  // (newer than the mark by more than the clock's tick)
  put(t / "stdout.log", "{\"x\": 1}\n{\"x\": 2}\n");
  put(t / "sub dir" / "  odd name\\", "bytes\n");
  put(t / "checkpoint_000001" / "model.pt", "not listed");
  put(t / "result.json", "not listed");
  put(t / "x.tmp", "not listed");
  ::chmod((t / "sub dir" / "  odd name\\").c_str(), 0750);
  auto c = exec::parse_changes(look(t, by_agent));
  REQUIRE(c.kind == Changes::Kind::kFiles);
  REQUIRE(c.files.size() == 3);
  std::sort(c.files.begin(), c.files.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });
  CHECK(c.files[0].path == "stdout.log");
  CHECK(c.files[0].data == "{\"x\": 1}\n{\"x\": 2}\n");
  CHECK(c.files[1].path == "sub dir");  // (new: made on the head, with its mtime)
  CHECK(c.files[1].dir);
  CHECK(c.files[2].path == "sub dir/  odd name\\");
  CHECK(c.files[2].data == "bytes\n");
  CHECK(c.files[2].mode == 0750);
  struct stat st {};
  REQUIRE(::stat((t / "stdout.log").c_str(), &st) == 0);
  CHECK(c.files[0].mtime.tv_sec == st.st_mtim.tv_sec);
  CHECK(c.files[0].mtime.tv_nsec == st.st_mtim.tv_nsec);
  // Written on the head: the same bytes and mtime, a new file with the host's mode.
  fs::path head = d.path / "head";
  fs::create_directories(head);
  REQUIRE(exec::write_changed_files(head, c.files));
  CHECK(util::read_file(head / "stdout.log").value() == "{\"x\": 1}\n{\"x\": 2}\n");
  CHECK(util::read_file(head / "sub dir" / "  odd name\\").value() == "bytes\n");
  REQUIRE(::stat((head / "stdout.log").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == c.files[0].mtime.tv_sec);
  CHECK(st.st_mtim.tv_nsec == c.files[0].mtime.tv_nsec);
  REQUIRE(::stat((head / "sub dir" / "  odd name\\").c_str(), &st) == 0);
  CHECK((st.st_mode & 0700) == 0700);
  REQUIRE(::stat((head / "sub dir").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == c.files[1].mtime.tv_sec);
  CHECK(st.st_mtim.tv_nsec == c.files[1].mtime.tv_nsec);
  // The next look lists them all unchanged, and the head has them as listed.
  auto after = exec::parse_changes(look(t, by_agent));
  REQUIRE(after.kind == Changes::Kind::kFiles);
  CHECK(std::none_of(after.files.begin(), after.files.end(), [](auto& f) { return f.changed; }));
  CHECK(exec::write_changed_files(head, after.files));
  // A file changed in place in a dir that is not: written on the head through a rename in that
  // dir, whose mtime is then set back to the host's.
  ::usleep(20'000);
  { std::ofstream(t / "sub dir" / "  odd name\\", std::ios::app) << "more\n"; }
  auto inplace = exec::parse_changes(look(t, by_agent));
  REQUIRE(inplace.kind == Changes::Kind::kFiles);
  REQUIRE(exec::write_changed_files(head, inplace.files));
  CHECK(util::read_file(head / "sub dir" / "  odd name\\").value() == "bytes\nmore\n");
  struct stat host_dir {
  }, head_dir{};
  REQUIRE(::stat((t / "sub dir").c_str(), &host_dir) == 0);
  REQUIRE(::stat((head / "sub dir").c_str(), &head_dir) == 0);
  CHECK(head_dir.st_mtim.tv_sec == host_dir.st_mtim.tv_sec);
  CHECK(head_dir.st_mtim.tv_nsec == host_dir.st_mtim.tv_nsec);
  // A file made since with an old mtime (cp -p, tar x, shutil.copy2) is not newer than the
  // mark: listed unchanged, and not on the head, so the files are not taken from the answer.
  put(t / "copied", "old\n");
  struct timespec old_times[2] = {{978307200, 0}, {978307200, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (t / "copied").c_str(), old_times, 0) == 0);
  auto copied = exec::parse_changes(look(t, by_agent));
  REQUIRE(copied.kind == Changes::Kind::kFiles);
  auto written = exec::write_changed_files(head, copied.files);
  REQUIRE_FALSE(written);
  CHECK(written.error().message == "copied is not on the head as the host has it");
  CHECK_FALSE(fs::exists(head / "copied"));
  // A look that does not take files only says whether anything changed (the first: yes).
  CHECK(exec::parse_changes(ask(d.path / "head", false)).kind == Changes::Kind::kRsync);
  CHECK(exec::parse_changes(ask(d.path / "head", false)).kind == Changes::Kind::kUnchanged);
  ::usleep(20'000);
  put(t / "stderr.log", "warning\n");
  CHECK(exec::parse_changes(ask(t, false)).kind == Changes::Kind::kRsync);
  CHECK(exec::parse_changes(ask(t, false)).kind == Changes::Kind::kUnchanged);
}

TEST_CASE("ssh changes: anything but a few small files asks for an rsync", "[ssh_changes]") {
  bool by_agent = GENERATE(false, true);
  CAPTURE(by_agent);
  ScratchDir d;
  fs::path t = d.path / "trial";
  fs::create_directories(t);
  auto after_mark = [&] {
    (void)look(t, by_agent);
    ::usleep(20'000);
  };
  SECTION("a link") {
    after_mark();
    fs::create_symlink("/etc/passwd", t / "link");
  }
  SECTION("a FIFO") {
    after_mark();
    REQUIRE(::mkfifo((t / "fifo").c_str(), 0600) == 0);
  }
  SECTION("a name with a newline") {
    after_mark();
    put(t / "two\nlines", "x");
  }
  SECTION("too many files") {
    after_mark();
    for (size_t i = 0; i <= exec::kMaxInlineFiles; ++i) put(t / ("f" + std::to_string(i)), "x");
  }
  SECTION("too many bytes") {
    after_mark();
    put(t / "big", std::string(exec::kMaxInlineBytes + 1, 'x'));
  }
  SECTION("no trial dir") {
    fs::remove_all(t);
  }
  CHECK(exec::parse_changes(look(t, by_agent)).kind == Changes::Kind::kRsync);
}

TEST_CASE("ssh changes: an answer not as expected asks for an rsync", "[ssh_changes]") {
  using K = Changes::Kind;
  std::string ok = answer(listed("a", "xy") + "o d 4096 1.5 755 sub\n", read_as("xy"));
  auto parsed = exec::parse_changes(ok);
  REQUIRE(parsed.kind == K::kFiles);
  REQUIRE(parsed.files.size() == 2);
  CHECK(parsed.files[0].data == "xy");
  CHECK((parsed.files[1].dir && !parsed.files[1].changed));
  CHECK(exec::parse_changes("unchanged\n").kind == K::kUnchanged);
  auto bad_listing = [](const std::string& line) { return answer(line, read_as("xy")); };
  for (std::string bad : {
           std::string(""),
           std::string("unchanged"),  // (cut short)
           std::string("rsync\n"),
           std::string("files\n"),
           std::string("files\n!!notbase64\n"),
           answer(""),
           ok.substr(0, ok.size() - 1),
           answer(listed("a", "xy"), read_as("xyz")),  // grew since listed
           answer(listed("a", "xy"), "N\n"),
           answer(listed("a", "xy"), "F\n!!notbase64\n"),
           answer(listed("a", "xy").substr(0, 10)),  // a listing cut short
           bad_listing(listed("../a", "xy")),
           bad_listing(listed("/etc/a", "xy")),
           bad_listing(listed("a/../../b", "xy")),
           bad_listing(listed("a//b", "xy")),
           bad_listing(listed("./a", "xy")),
           // (what a sync never copies: a host may not write it on the head)
           bad_listing(listed("result.json", "xy")),
           bad_listing(listed("checkpoint_000001/model.pt", "xy")),
           bad_listing(listed("sub/progress.csv", "xy")),
           bad_listing(listed(".sync_checkpoint_000002/a", "xy")),
           bad_listing(listed("a.tmp", "xy")),
           bad_listing("n l 4096 1.0 755 a\n"),
           bad_listing("x x 0 0 0 -\n"),
           bad_listing("m f 2 1.0 644 a\n"),
           bad_listing("n d 4096 1.0 17777 a\n"),
           bad_listing("n f 2 1.0 999 a\n"),
           bad_listing("n f 2 x.0 644 a\n"),
           bad_listing("n f -2 1.0 644 a\n"),
           bad_listing("n f 99999999999 1.0 644 a\n"),
       }) {
    INFO(bad);
    CHECK(exec::parse_changes(bad).kind == K::kRsync);
  }
  std::string many, reads;
  for (size_t i = 0; i <= exec::kMaxInlineFiles; ++i) {
    many += listed("f" + std::to_string(i), "x");
    reads += read_as("x");
  }
  CHECK(exec::parse_changes(answer(many, reads)).kind == K::kRsync);
  std::string listing;
  for (size_t i = 0; i <= exec::kMaxListed; ++i)
    listing += "o f 1 1.0 644 f" + std::to_string(i) + "\n";
  CHECK(exec::parse_changes(answer(listing)).kind == K::kRsync);
}

TEST_CASE("ssh changes: files are written inside the head's trial dir only", "[ssh_changes]") {
  ScratchDir d;
  fs::path head = d.path / "head", outside = d.path / "outside";
  fs::create_directories(head);
  fs::create_directories(outside);
  fs::create_directory_symlink(outside, head / "sub");
  fs::create_symlink(outside / "target", head / "link");
  exec::ListedFile f;
  f.data = "hostile";
  f.path = "sub/file";  // through a link on the head: refused
  CHECK_FALSE(exec::write_changed_files(head, {f}));
  f.path = "../outside/file";
  CHECK_FALSE(exec::write_changed_files(head, {f}));
  CHECK(fs::is_empty(outside));
  f.path = "link";  // a link there is replaced, its target never written
  REQUIRE(exec::write_changed_files(head, {f}));
  CHECK_FALSE(fs::exists(outside / "target"));
  CHECK(fs::is_regular_file(fs::symlink_status(head / "link")));
  // A file there keeps its mode.
  put(head / "run.sh", "old");
  ::chmod((head / "run.sh").c_str(), 0700);
  f.path = "run.sh";
  f.mode = 0644;
  REQUIRE(exec::write_changed_files(head, {f}));
  struct stat st {};
  REQUIRE(::stat((head / "run.sh").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(util::read_file(head / "run.sh").value() == "hostile");
}

TEST_CASE("ssh changes: the agent's look answers as the shell command does", "[ssh_changes]") {
  ScratchDir d;
  fs::path t = d.path / "trial";
  put(t / "stdout.log", "{\"x\": 1}\n");
  put(t / "a" / "b" / "c.txt", "c\n");
  (void)ask(t, true);
  ::usleep(20'000);
  put(t / "stdout.log", "{\"x\": 1}\n{\"x\": 2}\n");
  put(t / "a" / "new", std::string(1000, '\0') + "binary\xff");
  put(t / "checkpoint_000002" / "w", "not listed");
  ::chmod((t / "a" / "new").c_str(), 0600);
  // The same mark for both: the shell's look moves it, and it is put back as it was.
  fs::path mark = t / ".tune_sync_mark", saved = d.path / "mark";
  fs::copy_file(mark, saved);
  struct stat st {};
  REQUIRE(::stat(mark.c_str(), &st) == 0);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  auto by_shell = exec::parse_changes(ask(t, true));
  fs::copy_file(saved, mark, fs::copy_options::overwrite_existing);
  REQUIRE(::utimensat(AT_FDCWD, mark.c_str(), times, 0) == 0);
  auto by_agent = exec::parse_changes(agent::dir_changes(t.string()));
  REQUIRE(by_shell.kind == Changes::Kind::kFiles);
  REQUIRE(by_agent.kind == Changes::Kind::kFiles);
  auto by_path = [](auto& files) {
    std::sort(files.begin(), files.end(),
              [](const auto& a, const auto& b) { return a.path < b.path; });
  };
  by_path(by_shell.files);
  by_path(by_agent.files);
  REQUIRE(by_shell.files.size() == 5);  // a, a/b, a/b/c.txt, a/new, stdout.log
  REQUIRE(by_agent.files.size() == by_shell.files.size());
  for (size_t i = 0; i < by_shell.files.size(); ++i) {
    const auto &s = by_shell.files[i], &a = by_agent.files[i];
    CAPTURE(s.path);
    CHECK(a.path == s.path);
    CHECK(a.dir == s.dir);
    CHECK(a.changed == s.changed);
    CHECK(a.size == s.size);
    CHECK(a.mtime.tv_sec == s.mtime.tv_sec);
    CHECK(a.mtime.tv_nsec == s.mtime.tv_nsec);
    CHECK(a.mode == s.mode);
    CHECK(a.data == s.data);
  }
  // Both moved the mark past what they saw: a look now finds nothing changed.
  auto again = exec::parse_changes(agent::dir_changes(t.string()));
  REQUIRE(again.kind == Changes::Kind::kFiles);
  CHECK(std::none_of(again.files.begin(), again.files.end(), [](auto& f) { return f.changed; }));
  CHECK_FALSE(fs::exists(t / ".tune_sync_mark.tmp"));
}

TEST_CASE("ssh changes: the agent's answer fits in one event line", "[ssh_changes]") {
  ScratchDir d;
  fs::path t = d.path / "trial";
  SECTION("too many entries") {
    for (size_t i = 0; i <= exec::kMaxListed; ++i) put(t / ("f" + std::to_string(i)), "");
    (void)agent::dir_changes(t.string());
  }
  SECTION("a listing of long paths, unchanged") {
    fs::path deep = t / std::string(250, 'a') / std::string(250, 'b') / std::string(250, 'c');
    for (int i = 0; i < 800; ++i) put(deep / (std::to_string(i) + std::string(200, 'x')), "");
    CHECK(exec::parse_changes(ask(t, true)).kind == Changes::Kind::kRsync);  // (first: too many)
    CHECK(exec::parse_changes(ask(t, true)).kind == Changes::Kind::kFiles);  // (no limit)
  }
  std::string a = agent::dir_changes(t.string());
  CHECK(a == "rsync\n");
  CHECK(a.size() <= agent::kMaxAnswer);
}
