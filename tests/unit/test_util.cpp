// util: shell splitting, suggestions, atomic files, safe deletion, name safety.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>

#include "exec/executor.hpp"
#include "fake_executor.hpp"
#include "sync/workdir.hpp"
#include "trial/trial.hpp"
#include "util/atomic_file.hpp"
#include "util/cksum.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

using namespace tune;
namespace fs = std::filesystem;

TEST_CASE("shell_split honours quotes and escapes, expands nothing", "[util]") {
  using V = std::vector<std::string>;
  CHECK(*util::shell_split("a b  c") == V{"a", "b", "c"});
  CHECK(*util::shell_split("'a b' \"c d\" e\\ f") == V{"a b", "c d", "e f"});
  CHECK(*util::shell_split("\"a\\\"b\" 'x\\y'") == V{"a\"b", "x\\y"});
  CHECK(*util::shell_split("$(rm -rf ~) ; `x` *") == V{"$(rm", "-rf", "~)", ";", "`x`", "*"});
  CHECK(*util::shell_split("''") == V{""});
  CHECK(!util::shell_split("'open"));
  CHECK(!util::shell_split("\"open"));
  CHECK(!util::shell_split("trailing\\"));
}

TEST_CASE("shell_quote round-trips through shell_split", "[util]") {
  for (std::string w : {"plain", "a b", "it's", "$(x)", "", "; rm -rf ~", "\"q\""}) {
    auto back = util::shell_split(util::shell_quote(w));
    REQUIRE(back);
    CHECK(*back == std::vector<std::string>{w});
  }
}

TEST_CASE("lines_of splits at newlines, a last line without one included", "[util]") {
  using V = std::vector<std::string>;
  CHECK(util::lines_of("") == V{});
  CHECK(util::lines_of("a\nb\n") == V{"a", "b"});
  CHECK(util::lines_of("a\n\nb") == V{"a", "", "b"});
  CHECK(util::lines_of("\n") == V{""});
}

TEST_CASE("suggest finds near misses only", "[util]") {
  std::string_view keys[] = {"num_to_keep", "checkpoint_frequency", "checkpoint_at_end"};
  CHECK(util::suggest("num_to_kep", keys) == "num_to_keep");
  CHECK(util::suggest("checkpoint_at_nd", keys) == "checkpoint_at_end");
  CHECK(!util::suggest("banana", keys));
}

TEST_CASE("trial names are filesystem-safe and at most 200 bytes", "[util]") {
  std::vector<std::pair<std::string, nlohmann::json>> v = {{"path", "../../etc/passwd"},
                                                           {"x", std::string(1000, 'y')}};
  auto name = trial::make_trial_name("00001", v);
  CHECK(name.size() <= 200);
  CHECK(name.find('/') == std::string::npos);
  CHECK(name.rfind("trial_00001_path=", 0) == 0);
  CHECK(util::safe_component("..") == "_");
  CHECK(util::safe_component("") == "_");
  CHECK(util::safe_component("a b/c\n") == "a_b_c_");
}

TEST_CASE("AtomicFile replaces the whole file or nothing", "[util]") {
  testing::ScratchDir d;
  fs::path f = d.path / "state.json";
  REQUIRE(util::write_file_atomic(f, "old"));
  {
    util::AtomicFile a(f);
    REQUIRE(a.open());
    REQUIRE(a.write("new but never committed"));
  }  // destructor: temp removed, target untouched
  CHECK(*util::read_file(f) == "old");
  size_t entries = 0;
  for (auto& e : fs::directory_iterator(d.path)) (void)e, ++entries;
  CHECK(entries == 1);
  REQUIRE(util::write_file_atomic(f, "new"));
  CHECK(*util::read_file(f) == "new");
  CHECK(!util::write_file_atomic(d.path / "missing-dir" / "x", "y"));
}

TEST_CASE("remove_tree_nofollow deletes a symlink, never its target", "[util]") {
  testing::ScratchDir d;
  fs::create_directories(d.path / "outside");
  std::ofstream(d.path / "outside" / "precious") << "x";
  fs::create_directories(d.path / "trial" / "checkpoint_000002" / "sub");
  fs::create_directory_symlink(d.path / "outside", d.path / "trial" / "checkpoint_000001");
  fs::create_directory_symlink(d.path / "outside",
                               d.path / "trial" / "checkpoint_000002" / "sub" / "link");
  REQUIRE(util::remove_tree_nofollow(d.path / "trial", "checkpoint_000001"));
  REQUIRE(util::remove_tree_nofollow(d.path / "trial", "checkpoint_000002"));
  CHECK_FALSE(fs::exists(d.path / "trial" / "checkpoint_000001"));
  CHECK_FALSE(fs::exists(d.path / "trial" / "checkpoint_000002"));
  CHECK(fs::exists(d.path / "outside" / "precious"));
  CHECK(!util::remove_tree_nofollow(d.path / "trial", ".."));
  CHECK(!util::remove_tree_nofollow(d.path / "trial", "a/b"));
}

TEST_CASE("move_dir copies across filesystems keeping symlinks as links", "[util]") {
  testing::ScratchDir d;
  fs::create_directories(d.path / "src" / "sub");
  std::ofstream(d.path / "src" / "sub" / "w.bin") << "weights";
  fs::create_symlink("sub/w.bin", d.path / "src" / "link");
  // /dev/shm is usually another filesystem; fall back to same-fs rename otherwise.
  fs::path dst = fs::exists("/dev/shm")
                     ? fs::path("/dev/shm") / ("tune-move-" + std::to_string(::getpid()))
                     : d.path / "dst";
  REQUIRE(util::move_dir(d.path / "src", dst));
  CHECK(fs::is_symlink(dst / "link"));
  CHECK(*util::read_file(dst / "sub" / "w.bin") == "weights");
  CHECK_FALSE(fs::exists(d.path / "src"));
  fs::remove_all(dst);
}

TEST_CASE("copy_dir keeps a sparse file's holes, and skips a FIFO", "[util]") {
  testing::ScratchDir d;
  fs::create_directories(d.path / "src");
  int fd = ::open((d.path / "src" / "sparse.bin").c_str(), O_WRONLY | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, off_t{4} << 30) == 0);  // 4 GiB, 8 KiB of data at 1 GiB and at the end
  REQUIRE(::pwrite(fd, std::string(8192, 'a').data(), 8192, off_t{1} << 30) == 8192);
  REQUIRE(::pwrite(fd, std::string(8192, 'z').data(), 8192, (off_t{4} << 30) - 8192) == 8192);
  ::close(fd);
  REQUIRE(::mkfifo((d.path / "src" / "fifo").c_str(), 0600) == 0);
  std::atomic<bool> never{false};
  REQUIRE(util::copy_dir(d.path / "src", d.path / "dst", never));
  struct stat st {};
  REQUIRE(::stat((d.path / "dst" / "sparse.bin").c_str(), &st) == 0);
  CHECK(st.st_size == off_t{4} << 30);
  CHECK(st.st_blocks * 512 < (off_t{1} << 20));  // (not written out)
  fd = ::open((d.path / "dst" / "sparse.bin").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  std::string a(8192, '\0'), z(8192, '\0'), hole(8192, 'x');
  CHECK(::pread(fd, a.data(), 8192, off_t{1} << 30) == 8192);
  CHECK(::pread(fd, z.data(), 8192, (off_t{4} << 30) - 8192) == 8192);
  CHECK(::pread(fd, hole.data(), 8192, off_t{2} << 30) == 8192);
  ::close(fd);
  CHECK(a == std::string(8192, 'a'));
  CHECK(z == std::string(8192, 'z'));
  CHECK(hole == std::string(8192, '\0'));
  CHECK_FALSE(fs::exists(d.path / "dst" / "fifo"));
}

TEST_CASE("fill_template puts each value into its word, once, never through a shell", "[util]") {
  auto argv = util::fill_template("rclone sync --x='a b' {source} dst={target}", "/p/{target}/",
                                  "s3://b/$(rm -rf x)");
  CHECK(argv == std::vector<std::string>{"rclone", "sync", "--x=a b", "/p/{target}/",
                                         "dst=s3://b/$(rm -rf x)"});
  CHECK(util::fill_template("cmd 'unclosed {source}", "a", "b").empty());
}

TEST_CASE("parse_exit_record believes only this attempt's well-formed supervisor record",
          "[util]") {
  auto ok = exec::parse_exit_record(
      R"({"attempt":2,"exit_code":0,"signal":null,"reason":"exited","error":"","ended":1.5,"pid":7})",
      2);
  REQUIRE(ok);
  CHECK(*ok->exit_code == 0);
  CHECK(*ok->pid == 7);
  CHECK(ok->reason == exec::ExitReason::kExited);
  // Reasons are read back by name; one this driver does not know counts as an exit.
  for (auto r :
       {exec::ExitReason::kExited, exec::ExitReason::kDriverStop, exec::ExitReason::kOrphaned,
        exec::ExitReason::kExecFailed, exec::ExitReason::kSupervisorDied,
        exec::ExitReason::kHostLost, exec::ExitReason::kPreempted}) {
    CHECK(exec::parse_exit_reason(exec::exit_reason_name(r)) == r);
    auto rec = exec::parse_exit_record(
        std::string(R"({"attempt":2,"reason":")") + exec::exit_reason_name(r) + R"(","ended":1})",
        2);
    REQUIRE(rec);
    CHECK(rec->reason == r);
  }
  CHECK_FALSE(exec::parse_exit_reason("host_lost "));
  auto future = exec::parse_exit_record(R"({"attempt":2,"reason":"teleported","ended":1})", 2);
  REQUIRE(future);
  CHECK(future->reason == exec::ExitReason::kExited);
  for (const char* bad :
       {R"({"attempt":1,"reason":"exited","ended":1})",  // another attempt
        R"({"attempt":"2","reason":"exited","ended":1})", R"({"attempt":2,"reason":5,"ended":1})",
        R"({"attempt":2,"reason":"x"})", "not json {", "[2]", ""})
    CHECK_FALSE(exec::parse_exit_record(bad, 2));
}

TEST_CASE("invalid_utf8_at finds the first byte that is not well-formed UTF-8", "[util]") {
  using util::invalid_utf8_at;
  constexpr auto npos = std::string_view::npos;
  CHECK(invalid_utf8_at("plain ascii") == npos);
  CHECK(invalid_utf8_at("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == npos);  // é € 😀
  CHECK(invalid_utf8_at("x\xffy") == 1);
  CHECK(invalid_utf8_at("ab\xc3") == 2);                        // cut short
  CHECK(invalid_utf8_at("\xc0\xaf") == 0);                      // overlong '/'
  CHECK(invalid_utf8_at("\xe0\x80\xaf") == 0);                  // overlong
  CHECK(invalid_utf8_at("a\xed\xa0\x80") == 1);                 // a UTF-16 surrogate
  CHECK(invalid_utf8_at("\xf4\x90\x80\x80") == 0);              // above U+10FFFF
  CHECK(invalid_utf8_at("\xe2\x82\x28") == 0);                  // bad continuation
  CHECK(invalid_utf8_at(std::string_view("a\0b", 3)) == npos);  // NUL is UTF-8 (checked apart)
}

TEST_CASE("workdir plan: .git, the storage path and files over 100 MiB are left out", "[sync]") {
  char tmpl[] = "/tmp/tune-wd-XXXXXX";
  std::filesystem::path d = ::mkdtemp(tmpl);
  std::filesystem::create_directories(d / ".git");
  std::filesystem::create_directories(d / "results" / "exp");
  std::filesystem::create_directories(d / "src");
  std::ofstream(d / "src" / "a.py") << "x = 1\n";
  std::ofstream(d / "results" / "exp" / "r.json") << "{}\n";
  { std::ofstream big(d / "big.bin"); }
  std::filesystem::resize_file(d / "big.bin", (100ull << 20) + 1);
  auto p = sync::plan_workdir(d, d / "results");
  REQUIRE(p);
  CHECK(p->files == 1);
  CHECK(p->left_out ==
        std::vector<std::string>{".git", "big.bin (104.9 MB)", "results (the storage path)"});
  std::string before = p->stamp;
  CHECK(sync::plan_workdir(d, d / "results")->stamp == before);
  std::ofstream(d / "results" / "exp" / "r2.json") << "{}\n";  // the storage path: no change
  CHECK(sync::plan_workdir(d, d / "results")->stamp == before);
  std::ofstream(d / "src" / "b.py") << "y = 2\n";
  CHECK(sync::plan_workdir(d, d / "results")->stamp != before);
  CHECK_FALSE(sync::plan_workdir(d / "missing", d / "results"));
  std::filesystem::remove_all(d);
}

TEST_CASE("workdir plan: SSH hosts' storage paths inside the workdir are left out", "[sync]") {
  char tmpl[] = "/tmp/tune-wd-XXXXXX";
  std::filesystem::path d = ::mkdtemp(tmpl);
  std::filesystem::create_directories(d / "hosts" / "w1" / "exp" / ".workdir");
  std::filesystem::create_directories(d / "src");
  std::ofstream(d / "src" / "a.py") << "x = 1\n";
  std::ofstream(d / "hosts" / "w1" / "exp" / ".workdir" / "a.py") << "x = 1\n";
  // A host on this filesystem (NFS, the same machine) whose storage path lies inside: the copy
  // would go into itself. Relative and "~" paths are the host's own, never the head's.
  auto p = sync::plan_workdir(d, d / "results",
                              {{"w1", d / "hosts" / "w1"},
                               {"w2", "/elsewhere/results"},
                               {"w3", "hosts"},
                               {"w4", "~/tune_results"},
                               {"w5", d / "hosts" / "w1"}});
  REQUIRE(p);
  CHECK(p->files == 1);
  CHECK(p->excludes == std::vector<std::string>{"/results", "/hosts/w1"});
  CHECK(p->left_out == std::vector<std::string>{"hosts/w1 (host w1's storage path)",
                                                "results (the storage path)"});
  // A host whose storage path is the workdir itself: the copy would go to <workdir>/exp/.workdir,
  // so that experiment's dir is left out (the rest of the workdir is the code).
  std::filesystem::create_directories(d / "exp" / ".workdir");
  std::ofstream(d / "exp" / ".workdir" / "a.py") << "x = 1\n";
  auto same = sync::plan_workdir(d, d / "results", {{"w6", d}}, "exp");
  REQUIRE(same);
  CHECK(same->files == 2);  // src/a.py and hosts/w1/exp/.workdir/a.py (w1 is not a host here)
  CHECK(std::find(same->excludes.begin(), same->excludes.end(), "/exp") != same->excludes.end());
  std::filesystem::remove_all(d);
}

TEST_CASE("spawned helpers: found on PATH, output in their log, signals as at a fresh start",
          "[util][spawn]") {
  testing::ScratchDir d;
  // The driver blocks signals and ignores some; a helper must start with none of that.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  // (cat reads its own status: no shell between, whose own masking while it forks would show)
  auto rc = util::run_process({"cat", "/proc/self/status"}, d.path / "log", 10);
  // The log reaches a helper as its stdout and stderr only, not as a third descriptor.
  auto fds = util::run_process({"ls", "-l", "/proc/self/fd"}, d.path / "fds", 10);
  REQUIRE(fds);
  std::string listing = util::read_file(d.path / "fds").value_or("");
  size_t links = 0;
  for (size_t at = 0; (at = listing.find((d.path / "fds").string(), at)) != std::string::npos; ++at)
    ++links;
  CHECK(links == 2);
  auto seven = util::run_process({"sh", "-c", "exit 7"}, d.path / "log7", 10);
  ::signal(SIGPIPE, old_pipe);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  REQUIRE(rc);
  CHECK(*rc == 0);
  REQUIRE(seven);
  CHECK(*seven == 7);
  auto log = util::read_file(d.path / "log");
  REQUIRE(log);
  CHECK(log->find("SigBlk:\t0000000000000000") != std::string::npos);
  // (SIGPIPE ignored would be bit 13: 0x1000)
  CHECK(log->find("SigIgn:\t0000000000000000") != std::string::npos);
  // A script without a #! line runs under sh, as execvp would run it.
  std::ofstream(d.path / "plain") << "echo plain $1\n";
  ::chmod((d.path / "plain").c_str(), 0755);
  auto plain = util::run_process({(d.path / "plain").string(), "arg"}, d.path / "log3", 10);
  REQUIRE(plain);
  CHECK(*plain == 0);
  CHECK(util::read_file(d.path / "log3").value_or("") == "plain arg\n");
  // A program that is not there, and a log that cannot be made: one error each.
  auto missing = util::spawn_process({"no-such-program-tune-test"}, d.path / "log2");
  REQUIRE(!missing);
  CHECK(missing.error().message ==
        "cannot run 'no-such-program-tune-test': No such file or directory");
  auto badlog = util::spawn_process({"true"}, d.path / "no" / "such" / "dir" / "log");
  REQUIRE(!badlog);
  CHECK(badlog.error().message == "cannot run 'true': No such file or directory");
}

TEST_CASE("posix_cksum is what cksum prints", "[util][cksum]") {
  CHECK(util::posix_cksum("") == 4294967295u);
  CHECK(util::posix_cksum("hello\n") == 3015617425u);
  CHECK(util::posix_cksum(std::string(1000000, 'a')) == 3401932319u);
  // and on bytes of every value, against the system's own cksum
  std::string data;
  for (int i = 0; i < 70000; ++i) data += static_cast<char>((i * 7919) % 256);
  char tmpl[] = "/tmp/tune-cksum-XXXXXX";
  int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  ::close(fd);
  std::string out;
  if (FILE* p = ::popen(("cksum " + std::string(tmpl)).c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  ::unlink(tmpl);
  CHECK(out.substr(0, out.find(' ')) == std::to_string(util::posix_cksum(data)));
}

TEST_CASE("proc_stat reads a process's name, state, session and start, whatever its name holds",
          "[util]") {
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setsid();
    ::prctl(PR_SET_NAME, "a) S 1 (b c", 0, 0, 0);  // looks like the fields that follow
    char byte = 1;
    (void)!::write(ready[1], &byte, 1);
    (void)!::read(go[0], &byte, 1);
    ::_exit(0);
  }
  char byte;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  auto st = util::proc_stat(child);
  for (int i = 0; i < 400 && st && st->state != 'S'; ++i) {  // until it blocks in read()
    ::usleep(5000);
    st = util::proc_stat(child);
  }
  REQUIRE(st);
  CHECK(st->comm == "a) S 1 (b c");
  CHECK(st->state == 'S');
  CHECK(st->session == child);
  CHECK(st->start == util::process_start_ticks(child));
  CHECK(st->start > 0);
  ::kill(child, SIGSTOP);
  for (int i = 0; i < 200 && util::proc_stat(child)->state != 'T'; ++i) ::usleep(5000);
  CHECK(util::proc_stat(child)->state == 'T');
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK_FALSE(util::proc_stat(child));
  CHECK_FALSE(util::proc_stat(0));
  CHECK_FALSE(util::proc_stat(-1));
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
}

TEST_CASE("parse_proc_stat reads a stat line read elsewhere (an SSH host's), and its pid",
          "[util]") {
  std::string line =
      "4242 (tune-agent) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10 "
      "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
  auto parsed = util::parse_proc_stat(line);
  REQUIRE(parsed);
  CHECK(parsed->first == 4242);
  CHECK(parsed->second.comm == "tune-agent");
  CHECK(parsed->second.state == 'S');
  CHECK(parsed->second.session == 4242);
  CHECK(parsed->second.start == 987654);
  CHECK_FALSE(util::parse_proc_stat(""));
  CHECK_FALSE(util::parse_proc_stat("4242 (tune-agent) S 1 2 3"));  // cut short
  CHECK_FALSE(util::parse_proc_stat("x (tune-agent)" + line.substr(line.find(')') + 1)));
  CHECK_FALSE(util::parse_proc_stat("-5 (tune-agent)" + line.substr(line.find(')') + 1)));
}

TEST_CASE("random_hex: hex digits, a new draw each time", "[util]") {
  auto a = util::random_hex(8), b = util::random_hex(8);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->size() == 16);
  CHECK(a->find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(*a != *b);  // (equal once in 2^64 draws)
  CHECK(util::random_hex(0).value().empty());
}
