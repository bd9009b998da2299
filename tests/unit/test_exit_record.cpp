// The supervisor's exit record: attempt nonces, and telling a genuine record from a forged one.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "exec/exit_record.hpp"
#include "util/fs.hpp"

using namespace tune;
namespace fs = std::filesystem;

namespace {

std::string record(const std::string& nonce, int attempt = 2, int supervisor = 40, int pid = 41,
                   uint64_t started = 500) {
  return R"({"attempt":)" + std::to_string(attempt) + R"(,"nonce":")" + nonce +
         R"(","supervisor":)" + std::to_string(supervisor) + R"(,"pid":)" + std::to_string(pid) +
         R"(,"started":)" + std::to_string(started) +
         R"(,"exit_code":3,"signal":null,"reason":"exited","error":"","ended":1.5})";
}

}  // namespace

TEST_CASE("attempt nonces depend on the key, the trial and the attempt", "[exit_record]") {
  std::string k1(32, 'a'), k2(32, 'b');
  std::string n = exec::attempt_nonce(k1, "trial_00000", 1);
  CHECK(n.size() == 32);
  CHECK(n.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(n == exec::attempt_nonce(k1, "trial_00000", 1));
  CHECK(n != exec::attempt_nonce(k2, "trial_00000", 1));
  CHECK(n != exec::attempt_nonce(k1, "trial_00001", 1));
  CHECK(n != exec::attempt_nonce(k1, "trial_00000", 2));
  // The name and the attempt are not simply concatenated: "x1"+1 is not "x"+11.
  CHECK(exec::attempt_nonce(k1, "x1", 1) != exec::attempt_nonce(k1, "x", 11));
  CHECK(exec::record_path("trial_00000") == ".tune/exit/trial_00000.json");
}

TEST_CASE("the record key is made once and read back", "[exit_record]") {
  fs::path dir = fs::temp_directory_path() / ("tune-key-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto a = exec::load_record_key(dir / "supervisor.key");
  REQUIRE(a);
  CHECK(a->size() == 32);
  auto b = exec::load_record_key(dir / "supervisor.key");
  REQUIRE(b);
  CHECK(*a == *b);
  CHECK((fs::status(dir / "supervisor.key").permissions() & fs::perms::others_read) ==
        fs::perms::none);
  // A damaged key file gets a fresh key rather than an error.
  {
    std::FILE* f = std::fopen((dir / "supervisor.key").c_str(), "w");
    std::fputs("not a key\n", f);
    std::fclose(f);
  }
  auto c = exec::load_record_key(dir / "supervisor.key");
  REQUIRE(c);
  CHECK(c->size() == 32);
  CHECK(*c != *a);
  fs::remove_all(dir);
}

TEST_CASE("check_exit_record believes only the attempt's own supervisor", "[exit_record]") {
  std::string nonce = exec::attempt_nonce(std::string(32, 'c'), "trial_00003", 2);
  exec::AttemptIdentity who;
  who.nonce = nonce;
  exec::ExitInfo info;

  SECTION("no file") {
    CHECK(exec::check_exit_record(std::nullopt, 2, who, info) == exec::RecordCheck::kAbsent);
  }
  SECTION("genuine, with nothing else known") {
    REQUIRE(exec::check_exit_record(record(nonce), 2, who, info) == exec::RecordCheck::kGenuine);
    CHECK(*info.exit_code == 3);
    CHECK(*info.pid == 41);
    CHECK(*info.supervisor == 40);
    CHECK(*info.started == 500);
    CHECK_FALSE(info.stdout_size);  // (no stdout.log was written)
  }
  SECTION("the size of the stdout.log its supervisor wrote, when it gives one") {
    std::string r = record(nonce);
    r.insert(r.size() - 1, R"(,"stdout_size":1234)");
    REQUIRE(exec::check_exit_record(r, 2, who, info) == exec::RecordCheck::kGenuine);
    CHECK(info.stdout_size == std::optional<uint64_t>(1234));
    r = record(nonce);
    r.insert(r.size() - 1, R"(,"stdout_size":-5)");
    REQUIRE(exec::check_exit_record(r, 2, who, info) == exec::RecordCheck::kGenuine);
    CHECK_FALSE(info.stdout_size);
  }
  SECTION("genuine, matching the supervisor and the trial process seen") {
    who.supervisor = 40;
    who.pid = 41;
    who.started = 500;
    CHECK(exec::check_exit_record(record(nonce), 2, who, info) == exec::RecordCheck::kGenuine);
  }
  SECTION("forged: no nonce, a wrong one, or another attempt's") {
    CHECK(exec::check_exit_record(record(""), 2, who, info) == exec::RecordCheck::kForged);
    CHECK(exec::check_exit_record(record(std::string(32, '0')), 2, who, info) ==
          exec::RecordCheck::kForged);
    CHECK(exec::check_exit_record(record(nonce, 3), 2, who, info) == exec::RecordCheck::kForged);
    CHECK(exec::check_exit_record(
              record(exec::attempt_nonce(std::string(32, 'c'), "trial_00003", 1), 1), 1, who,
              info) == exec::RecordCheck::kForged);
  }
  SECTION("an earlier attempt's record: none for this attempt yet (not a forged one)") {
    auto earlier = exec::attempt_nonce(std::string(32, 'c'), "trial_00003", 1);
    CHECK(exec::check_exit_record(record(earlier, 1), 2, who, info) == exec::RecordCheck::kAbsent);
    CHECK(exec::check_exit_record(record(nonce, 0), 2, who, info) == exec::RecordCheck::kForged);
  }
  SECTION("forged: the right nonce but another supervisor, process or start time") {
    who.supervisor = 40;
    who.pid = 41;
    who.started = 500;
    CHECK(exec::check_exit_record(record(nonce, 2, 99), 2, who, info) ==
          exec::RecordCheck::kForged);
    CHECK(exec::check_exit_record(record(nonce, 2, 40, 99), 2, who, info) ==
          exec::RecordCheck::kForged);
    CHECK(exec::check_exit_record(record(nonce, 2, 40, 41, 501), 2, who, info) ==
          exec::RecordCheck::kForged);
  }
  SECTION("forged: junk in the file") {
    for (const char* junk : {"", "not json {", "[2]", R"({"attempt":2})"})
      CHECK(exec::check_exit_record(std::string(junk), 2, who, info) == exec::RecordCheck::kForged);
  }
  SECTION("the driver knows no nonce: nothing is believed") {
    who.nonce.clear();
    CHECK(exec::check_exit_record(record(""), 2, who, info) == exec::RecordCheck::kForged);
  }
}

TEST_CASE("attempt markers are recognised exactly", "[exit_record]") {
  CHECK(exec::is_attempt_marker("=== attempt 2 ==="));
  CHECK(exec::is_attempt_marker("=== attempt 117 ==="));
  CHECK_FALSE(exec::is_attempt_marker("=== attempt  ==="));
  CHECK_FALSE(exec::is_attempt_marker("=== attempt x ==="));
  CHECK_FALSE(exec::is_attempt_marker("Traceback: === attempt 2 ==="));
  CHECK_FALSE(exec::is_attempt_marker("ValueError: bad"));
}
