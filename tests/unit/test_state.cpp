// experiment_state.json: round trip, and every truncation is detected, never a crash.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cmath>

#include <fstream>
#include <future>
#include <limits>

#include "fake_executor.hpp"
#include "state/state.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"

using namespace tune;
namespace fs = std::filesystem;

namespace {
state::ExperimentState sample() {
  state::ExperimentState s;
  s.name = "exp";
  s.seed = 7;
  s.total_trials = 3;
  s.next_index = 2;
  s.metric = "loss";
  for (int i = 0; i < 2; ++i) {
    trial::Trial t;
    t.id = "0000" + std::to_string(i);
    t.name = "trial_" + t.id + "_lr=0.1";
    t.index = static_cast<uint64_t>(i);
    t.config = {{"lr", 0.1}};
    t.status = i ? trial::Status::kError : trial::Status::kTerminated;
    t.attempt = 2;
    t.error = i ? "exit code 1" : "";
    t.metrics["loss"] = {0.3, 0.1, 0.9};
    trial::Checkpoint c;
    c.seq = 3;
    c.iteration = 9;
    c.metrics = {{"loss", 0.1}};
    t.checkpoints.push_back(c);
    t.checkpoint_seq = 3;
    t.stdout_offset = 1234;
    t.job_id = i ? "" : "4711";
    s.trials.push_back(t);
  }
  return s;
}
}  // namespace

TEST_CASE("state round-trips through the file", "[state]") {
  testing::ScratchDir d;
  REQUIRE(state::save(d.path, sample(), true));
  auto s = state::load(d.path);
  REQUIRE(s);
  CHECK(state::to_json(*s) == state::to_json(sample()));
}

TEST_CASE("a state file cut at any byte is refused with a message, not a crash", "[state]") {
  testing::ScratchDir d;
  std::string full = state::to_json(sample()).dump(1) + "\n";
  size_t accepted = 0;
  // Every proper prefix short of the final newline is incomplete JSON.
  for (size_t n = 0; n + 1 < full.size(); ++n) {
    REQUIRE(util::write_file_atomic(d.path / state::kStateFile, full.substr(0, n), false));
    auto s = state::load(d.path);
    if (s)
      ++accepted;
    else
      CHECK(s.error().message.find(state::kStateFile) != std::string::npos);
  }
  CHECK(accepted == 0);
}

TEST_CASE("foreign, versioned and hostile states are refused", "[state]") {
  using json = nlohmann::json;
  auto j = state::to_json(sample());
  j["version"] = 99;
  CHECK(state::from_json(j, "f").error().message.find("version 99") != std::string::npos);
  j = state::to_json(sample());
  j["trials"][0]["trial_name"] = "../../etc";
  CHECK(state::from_json(j, "f").error().message.find("unsafe trial name") != std::string::npos);
  j = state::to_json(sample());
  j["trials"][0]["status"] = "DANCING";
  CHECK(!state::from_json(j, "f"));
  j = state::to_json(sample());
  j["trials"][0]["checkpoints"][0]["seq"] = "x";
  CHECK(!state::from_json(j, "f"));
  CHECK(!state::from_json(json::array(), "f"));
  // Numbers where integers belong: refused, never cast (1e137 to an integer is undefined
  // behaviour; the state fuzzer found it in searcher.seed).
  for (json bad : {json(2.87e137), json(-1), json(1.5), json(1e19)}) {
    j = state::to_json(sample());
    j["searcher"]["seed"] = bad;
    auto s = state::from_json(j, "f");
    INFO(bad.dump());
    REQUIRE(!s);
    CHECK(s.error().message.find("'seed' is not an integer in range") != std::string::npos);
  }
  j = state::to_json(sample());
  j["trials"][0]["attempt"] = 1e300;
  CHECK(!state::from_json(j, "f"));
  // A Slurm job id, or a job step's JOBID.STEPID (use_allocation); nothing else.
  for (const char* good : {"12345", "12345.3"}) {
    j = state::to_json(sample());
    j["trials"][0]["job_id"] = good;
    INFO(good);
    CHECK(state::from_json(j, "f"));
  }
  for (const char* bad : {"1.2.3", ".3", "12.", "12;rm", "12 3"}) {
    j = state::to_json(sample());
    j["trials"][0]["job_id"] = bad;
    INFO(bad);
    auto s = state::from_json(j, "f");
    REQUIRE(!s);
    CHECK(s.error().message.find("not a Slurm job id") != std::string::npos);
  }
  j = state::to_json(sample());
  j["trials"][0]["gpu_ids"] = {0, 7.7e38};  // found by the fuzzer too, in a list
  REQUIRE(!state::from_json(j, "f"));
  CHECK(state::from_json(j, "f").error().message.find("'gpu_ids' is not an integer in range") !=
        std::string::npos);
}

TEST_CASE("a trial's Slurm job id is kept with the state; anything else is refused", "[state]") {
  auto j = state::to_json(sample());
  auto s = state::from_json(j, "f");
  REQUIRE(s);
  CHECK(s->trials[0].job_id == "4711");
  CHECK(s->trials[1].job_id.empty());
  j["trials"][0].erase("job_id");  // a state from before job ids were kept
  REQUIRE(state::from_json(j, "f"));
  CHECK(state::from_json(j, "f")->trials[0].job_id.empty());
  for (nlohmann::json bad : {nlohmann::json("12; rm -rf"), nlohmann::json(12), nlohmann::json("-1"),
                             nlohmann::json(std::string(30, '9'))}) {
    j["trials"][0]["job_id"] = bad;
    INFO(bad.dump());
    CHECK_FALSE(state::from_json(j, "f"));
  }
}

TEST_CASE("NaN and Infinity of results survive the state file and the journal", "[state]") {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  testing::ScratchDir d;
  auto s = sample();
  auto& t = s.trials[0];
  t.last_result = {{"loss", std::nan("")}, {"grad", kInf}, {"training_iteration", 9}};
  t.metrics["loss"] = {std::nan(""), 0.1, 0.9};
  t.metrics["grad"] = {kInf, -kInf, kInf};
  t.checkpoints[0].metrics = {{"loss", std::nan("")}, {"grad", -kInf}};
  t.config = {{"lr", std::nan("")}};
  state::StateWriter w;
  REQUIRE(w.save(d.path, s, false));
  auto text = *util::read_file(d.path / state::kStateFile);
  CHECK(text.find("\"loss\":NaN") != std::string::npos);
  auto back = state::load(d.path);
  REQUIRE(back);
  const auto& b = back->trials[0];
  CHECK(std::isnan(b.last_result["loss"].get<double>()));
  CHECK(b.last_result["grad"].get<double>() == kInf);
  CHECK(std::isnan(b.metrics.at("loss").last));
  CHECK(b.metrics.at("grad").min == -kInf);
  CHECK(std::isnan(b.checkpoints[0].metrics["loss"].get<double>()));
  CHECK(b.checkpoints[0].metrics["grad"].get<double>() == -kInf);
  CHECK(std::isnan(b.config["lr"].get<double>()));
  // Written again, the file is the same: nothing became null on the way.
  testing::ScratchDir d2;
  REQUIRE(state::save(d2.path, *back, false));
  CHECK(*util::read_file(d2.path / state::kStateFile) == text);

  // A launch line in the journal carries the config as well.
  state::Journal journal;
  REQUIRE(journal.open(d.path));
  trial::Trial fresh;
  fresh.id = "00002";
  fresh.name = "trial_00002";
  fresh.index = 2;
  fresh.attempt = 1;
  fresh.config = {{"lr", kInf}};
  REQUIRE(journal.record_launch(fresh));
  auto replayed = state::load(d.path);
  REQUIRE(replayed);
  REQUIRE(replayed->trials.size() == 3);
  CHECK(replayed->trials[2].config["lr"].get<double>() == kInf);
}

TEST_CASE("a state written with null for NaN metrics (before NaN was kept) still loads",
          "[state]") {
  auto j = state::to_json(sample());
  j["trials"][0]["metrics"]["loss"] = {{"last", nullptr}, {"min", 0.1}, {"max", nullptr}};
  auto s = state::from_json(j, "f");
  REQUIRE(s);
  CHECK(std::isnan(s->trials[0].metrics.at("loss").last));
  CHECK(s->trials[0].metrics.at("loss").min == 0.1);
}

TEST_CASE("pbt fields round-trip; a malformed pending exploit is refused", "[state][pbt]") {
  using json = nlohmann::json;
  auto s = sample();
  s.pbt_policy_bytes = 321;
  s.trials[0].exploited_from = "00001";
  s.trials[0].exploited_at = 6;
  s.trials[0].exploits = 2;
  s.trials[0].pending_exploit = {{"n", 3},
                                 {"time", 1.5e9},
                                 {"at", 9},
                                 {"donor", "00001"},
                                 {"donor_seq", 4},
                                 {"donor_iteration", 8},
                                 {"old_config", {{"lr", 0.1}}},
                                 {"new_config", {{"lr", 0.2}}}};
  auto back = state::from_json(state::to_json(s), "f");
  REQUIRE(back);
  CHECK(back->pbt_policy_bytes == 321);
  CHECK(back->trials[0].exploited_from == "00001");
  CHECK(back->trials[0].exploited_at == 6);
  CHECK(back->trials[0].exploits == 2);
  CHECK(back->trials[0].pending_exploit == s.trials[0].pending_exploit);
  CHECK(back->trials[1].pending_exploit.is_null());
  for (json bad : {json(7), json{{"donor", 1}}, json{{"donor", "00001"}, {"donor_seq", "x"}}}) {
    auto j = state::to_json(s);
    j["trials"][0]["pending_exploit"] = bad;
    auto r = state::from_json(j, "f");
    INFO(bad.dump());
    REQUIRE(!r);
    CHECK(
        r.error().message.find("'pending_exploit' needs donor, donor_seq, n, at and new_config") !=
        std::string::npos);
  }
}

TEST_CASE("checkpoints being taken round-trip, through the cached writer too; bad ones are refused",
          "[state]") {
  using json = nlohmann::json;
  auto s = sample();
  s.trials[0].status = trial::Status::kRunning;
  s.trials[0].checkpoint_seq = 5;
  trial::Adopting a;
  a.checkpoint.seq = 5;
  a.checkpoint.iteration = 11;
  a.checkpoint.time_total_s = 2.5;
  a.checkpoint.metrics = {{"loss", 0.05}};
  a.reported = "/tmp/ck dir";
  s.trials[0].adopting.push_back(a);
  auto back = state::from_json(state::to_json(s), "f");
  REQUIRE(back);
  REQUIRE(back->trials[0].adopting.size() == 1);
  const auto& b = back->trials[0].adopting[0];
  CHECK(b.checkpoint.seq == 5);
  CHECK(b.checkpoint.iteration == 11);
  CHECK(b.checkpoint.time_total_s == 2.5);
  CHECK(b.checkpoint.metrics == a.checkpoint.metrics);
  CHECK(b.reported == "/tmp/ck dir");
  CHECK(back->trials[1].adopting.empty());
  CHECK_FALSE(state::to_json(s)["trials"][1].contains("adopting"));  // only while taking one

  // The writer that serializes only changed trials sees the record come and go.
  testing::ScratchDir d;
  state::StateWriter w;
  REQUIRE(w.save(d.path, s, false));
  s.trials[0].adopting.clear();
  REQUIRE(w.save(d.path, s, false));
  CHECK(w.last_serialized() == 1);
  auto loaded = state::load(d.path);
  REQUIRE(loaded);
  CHECK(loaded->trials[0].adopting.empty());

  for (auto [field, bad] : std::vector<std::pair<std::string, json>>{{"seq", 6},
                                                                     {"seq", 0},
                                                                     {"seq", 3},
                                                                     {"reported", ""},
                                                                     {"reported", 7},
                                                                     {"metrics", nullptr}}) {
    auto j = state::to_json(sample());
    j["trials"][0]["checkpoint_seq"] = 5;
    j["trials"][0]["adopting"] = json::array({{{"seq", 5},
                                               {"iteration", 11},
                                               {"time_total_s", 2.5},
                                               {"metrics", json::object()},
                                               {"reported", "ck"}}});
    j["trials"][0]["adopting"][0][field] = bad;
    INFO(field << " = " << bad.dump());
    auto r = state::from_json(j, "f");
    REQUIRE(!r);
    CHECK(r.error().message.find("trials[0].adopting") != std::string::npos);
  }
  auto j = state::to_json(sample());
  j["trials"][0]["adopting"] = "x";
  auto r = state::from_json(j, "f");
  REQUIRE(!r);
  CHECK(r.error().message.find("trials[0].adopting: not a list") != std::string::npos);
  // The same checkpoint twice (it would be registered twice), or out of order.
  j["trials"][0]["checkpoint_seq"] = 9;
  json entry = {{"seq", 5},
                {"iteration", 11},
                {"time_total_s", 2.5},
                {"metrics", json::object()},
                {"reported", "ck"}};
  j["trials"][0]["adopting"] = json::array({entry, entry});
  CHECK(!state::from_json(j, "f"));
  json later = entry;
  later["seq"] = 7;
  j["trials"][0]["adopting"] = json::array({later, entry});
  CHECK(!state::from_json(j, "f"));
  j["trials"][0]["adopting"] = json::array({entry, later});
  CHECK(state::from_json(j, "f"));
  // Registered checkpoints too: rising, each once.
  j["trials"][0]["checkpoints"].push_back(j["trials"][0]["checkpoints"][0]);
  r = state::from_json(j, "f");
  REQUIRE(!r);
  CHECK(r.error().message.find("not rising") != std::string::npos);
}

TEST_CASE("the scheduler log's length round-trips; a state without it counts 0", "[state]") {
  auto s = sample();
  s.scheduler_log_bytes = 4567;
  auto back = state::from_json(state::to_json(s), "f");
  REQUIRE(back);
  CHECK(back->scheduler_log_bytes == 4567);
  auto j = state::to_json(s);
  j.erase("scheduler_log_bytes");  // written before the log existed
  auto old = state::from_json(j, "f");
  REQUIRE(old);
  CHECK(old->scheduler_log_bytes == 0);
  j["scheduler_log_bytes"] = "12";
  CHECK(!state::from_json(j, "f"));
}

TEST_CASE("journalled decisions: kept for a RUNNING trial's current attempt, the latest wins",
          "[state]") {
  testing::ScratchDir d;
  auto s = sample();
  s.trials[1].status = trial::Status::kRunning;  // attempt 2
  REQUIRE(state::save(d.path, s, false));
  state::Journal journal;
  REQUIRE(journal.open(d.path));
  auto decision = [](std::string id, int attempt, trial::Reason r, int64_t it) {
    return state::JournalledDecision{std::move(id), attempt, r, trial::Cause::kCutoff, 3.5, it, {}};
  };
  REQUIRE(journal.record_decision(decision("00000", 2, trial::Reason::kStopped, 4)));  // ended
  REQUIRE(journal.record_decision(decision("00001", 1, trial::Reason::kStopped, 4)));  // old
  REQUIRE(journal.record_decision(decision("00001", 2, trial::Reason::kPaused, 5)));
  REQUIRE(journal.record_decision(decision("00001", 2, trial::Reason::kStopped, 6)));
  REQUIRE(journal.record_decision(decision("00009", 1, trial::Reason::kStopped, 6)));  // unknown
  // Malformed lines are ignored: a reason that is no decision, a cause that does not exist.
  {
    std::ofstream out(d.path / ".tune" / "state.journal", std::ios::app);
    out << R"({"decision":{"trial_id":"00001","attempt":2,"reason":"interrupted","cause":"cutoff","iteration":7}})"
        << "\n"
        << R"({"decision":{"trial_id":"00001","attempt":2,"reason":"stopped","cause":"bogus","iteration":7}})"
        << "\n"
        << R"({"decision":{"trial_id":"00001","attempt":2,"reason":"stopped"}})"
        << "\n";
  }
  auto back = state::load(d.path);
  REQUIRE(back);
  REQUIRE(back->decisions.size() == 1);
  const auto& got = back->decisions[0];
  CHECK(got.trial_id == "00001");
  CHECK(got.attempt == 2);
  CHECK(got.reason == trial::Reason::kStopped);
  CHECK(got.cause == trial::Cause::kCutoff);
  CHECK(got.decided_at == 3.5);
  CHECK(got.iteration == 6);
  CHECK(back->trials[1].reason == trial::Reason::kNone);  // the state itself is unchanged
  // Emptied by the next full write.
  REQUIRE(journal.reset());
  auto again = state::load(d.path);
  REQUIRE(again);
  CHECK(again->decisions.empty());
}

TEST_CASE(
    "a journalled exploit keeps its donor, checkpoint and new config; a malformed one is "
    "ignored",
    "[state]") {
  testing::ScratchDir d;
  auto s = sample();
  s.trials[1].status = trial::Status::kRunning;  // attempt 2
  REQUIRE(state::save(d.path, s, false));
  state::Journal journal;
  REQUIRE(journal.open(d.path));
  nlohmann::json exploit = {{"n", 1},
                            {"donor", "00000"},
                            {"donor_seq", 3},
                            {"donor_checkpoint", "trial_00000/checkpoint_000003"},
                            {"at", 3},
                            {"new_config", {{"q", 0.48}}},
                            {"old_config", {{"q", 0.1}}}};
  state::JournalledDecision dec{"00001", 2,      trial::Reason::kPaused, trial::Cause::kExploit, 3,
                                3,       exploit};
  REQUIRE(journal.record_decision(dec));
  auto back = state::load(d.path);
  REQUIRE(back);
  REQUIRE(back->decisions.size() == 1);
  CHECK(back->decisions[0].cause == trial::Cause::kExploit);
  CHECK(back->decisions[0].exploit == exploit);
  // A pause without it is a plain pause; an exploit record that is not whole (an object with
  // donor, donor_seq, n, at and new_config), or one on a stop, drops the line (a later whole
  // line about the trial still counts).
  {
    std::ofstream out(d.path / ".tune" / "state.journal", std::ios::app);
    out << R"({"decision":{"trial_id":"00001","attempt":2,"reason":"paused","cause":"exploit","iteration":4,"exploit":"00000"}})"
        << "\n"
        << R"({"decision":{"trial_id":"00001","attempt":2,"reason":"paused","cause":"exploit","iteration":4,"exploit":{"donor":5,"donor_seq":3,"n":1,"at":3,"new_config":{}}}})"
        << "\n"
        << R"({"decision":{"trial_id":"00001","attempt":2,"reason":"stopped","cause":"cutoff","iteration":4,"exploit":)"
        << exploit.dump() << "}}\n";
  }
  back = state::load(d.path);
  REQUIRE(back);
  REQUIRE(back->decisions.size() == 1);
  CHECK(back->decisions[0].iteration == 3);
  CHECK(back->decisions[0].exploit == exploit);
  dec.exploit = nullptr;
  dec.iteration = 6;
  REQUIRE(journal.record_decision(dec));
  back = state::load(d.path);
  REQUIRE(back);
  REQUIRE(back->decisions.size() == 1);
  CHECK(back->decisions[0].iteration == 6);
  CHECK(back->decisions[0].exploit.is_null());
}

// A FIFO planted as the state file (or its journal) is refused at once: open() on a FIFO with no
// writer blocked forever, hanging `tune status`, `tune ls` and `tune run --resume`.
TEST_CASE("a FIFO in place of the state file or the journal is refused, not waited on", "[state]") {
  // The error `fn` returns, within 5 s; a writer is offered to a blocked open() meanwhile so a
  // failing test still ends.
  auto error_within = [](const fs::path& fifo, auto fn) -> std::string {
    auto f = std::async(std::launch::async, [&]() -> std::string {
      auto r = fn();
      return r ? "" : r.error().message;
    });
    bool done = f.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    while (f.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    return done ? f.get() : "timed out";
  };
  for (const char* name : {state::kStateFile, ".tune/state.journal"}) {
    CAPTURE(name);
    testing::ScratchDir d;
    REQUIRE(state::save(d.path, sample(), false));
    fs::path p = d.path / name;
    fs::create_directories(p.parent_path());
    fs::remove(p);
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    std::string err = error_within(p, [&] { return state::load(d.path); });
    CHECK(err.find("not a regular file") != std::string::npos);
    CHECK(err.find(name) != std::string::npos);
    if (name != std::string(state::kStateFile)) continue;
    // What `tune ls` and `tune status` read first.
    err = error_within(p, [&] { return state::read_summary(d.path); });
    CHECK(err.find("not a regular file") != std::string::npos);
  }
}
