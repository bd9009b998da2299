// The host's shell's way to write step-mode lines (exec/ssh_stdin.hpp), run by /bin/sh here
// against a real FIFO: each line once, as the record says, and nothing written through a link.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/stdin_record.hpp"
#include "exec/ssh_stdin.hpp"
#include "util/strings.hpp"

namespace fs = std::filesystem;
using namespace tune;

namespace {

struct FifoDir {
  fs::path dir;
  int reader = -1;
  FifoDir() {
    char tmpl[] = "/tmp/tune-stdin-XXXXXX";
    dir = ::mkdtemp(tmpl);
    REQUIRE(::mkfifo((dir / "stdin.fifo").c_str(), 0600) == 0);
    reader = ::open((dir / "stdin.fifo").c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(reader >= 0);
  }
  ~FifoDir() {
    ::close(reader);
    fs::remove_all(dir);
  }
  std::string read_all() {
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    return got;
  }
  int run(uint64_t issued, const std::vector<std::pair<uint64_t, std::string>>& lines) {
    std::string cmd = exec::stdin_shell_command(dir.string(), "beef", issued, lines);
    int st = std::system(("/bin/sh -c " + util::shell_quote(cmd)).c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string record() {
    std::ifstream f(dir / "stdin.sent");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
};

}  // namespace

TEST_CASE("the shell writes step-mode lines once each, as the record says", "[ssh_stdin]") {
  FifoDir d;
  CHECK(d.run(2, {{1, "one"}, {2, "it's \"two\" $(x)"}}) == 0);
  CHECK(d.read_all() == "one\nit's \"two\" $(x)\n");
  CHECK(d.record() == agent::stdin_record_text({"beef", 2}));
  // Sent again (its agent may have written them): nothing; a later one goes.
  CHECK(d.run(3, {{1, "one"}, {2, "two"}, {3, "three"}}) == 0);
  CHECK(d.read_all() == "three\n");
  // Another run's record (a resumed driver's) does not cover this run's lines.
  std::ofstream(d.dir / "stdin.sent") << agent::stdin_record_text({"cafe", 9});
  CHECK(d.run(4, {{4, "four"}}) == 0);
  CHECK(d.read_all() == "four\n");
}

TEST_CASE("the shell refuses a record that is not the trial's own, and says why", "[ssh_stdin]") {
  FifoDir d;
  fs::path victim = d.dir / "victim";
  std::ofstream(victim) << "untouched";
  SECTION("a symbolic link") {
    fs::create_symlink(victim, d.dir / "stdin.sent");
  }
  SECTION("a hard link") {
    fs::create_hard_link(victim, d.dir / "stdin.sent");
  }
  SECTION("a directory") {
    fs::create_directories(d.dir / "stdin.sent");
  }
  SECTION("a FIFO") {
    REQUIRE(::mkfifo((d.dir / "stdin.sent").c_str(), 0600) == 0);
  }
  CHECK(d.run(1, {{1, "one"}}) == 4);
  CHECK(d.read_all().empty());
  std::ifstream f(victim);
  std::string text;
  std::getline(f, text);
  CHECK(text == "untouched");
}

TEST_CASE("the shell says a forged or locked record, and no FIFO", "[ssh_stdin]") {
  FifoDir d;
  // A record naming a line never sent (a trial that wrote it): every line would look sent.
  std::ofstream(d.dir / "stdin.sent") << agent::stdin_record_text({"beef", 99});
  CHECK(d.run(5, {{5, "five"}}) == 6);
  std::ofstream(d.dir / "stdin.sent") << "beef 99999999999999999999999\n";
  CHECK(d.run(5, {{5, "five"}}) == 6);
  CHECK(d.read_all().empty());
  // Locked by another process for longer than a writer holds it.
  fs::remove(d.dir / "stdin.sent");
  int held = ::open((d.dir / "stdin.sent").c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  CHECK(d.run(5, {{5, "five"}}) == 5);
  ::close(held);
  CHECK(d.read_all().empty());
  // Something else in the FIFO's place.
  fs::remove(d.dir / "stdin.fifo");
  std::ofstream(d.dir / "stdin.fifo") << "a file";
  CHECK(d.run(5, {{5, "five"}}) == 3);
}
