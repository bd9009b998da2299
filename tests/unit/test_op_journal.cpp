// The external searcher's op journal: ops numbered over the experiment's life, compaction that
// drops what a snapshot holds (the file swapped in whole, with a header naming its first op),
// reading back what a crash or a hand left in the file, and the plan of what a resume replays.
#include <catch2/catch.hpp>
#include <fstream>

#include "fake_executor.hpp"
#include "search/external_protocol.hpp"
#include "search/op_journal.hpp"

using namespace tune;
using tune::testing::ScratchDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {
json op(int i) {
  return {{"op", "result"}, {"trial_id", "t" + std::to_string(i)}};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
}  // namespace

TEST_CASE("op journal: compaction drops what a snapshot holds and keeps the numbering",
          "[search]") {
  ScratchDir d;
  fs::path file = d.path / "ops.jsonl";
  {
    search::OpJournal j;
    REQUIRE(j.open(file)->empty());
    for (int i = 0; i < 5; ++i) REQUIRE(j.append(op(i)));
    REQUIRE(j.compact(3));
    CHECK(j.base() == 3);
    CHECK(j.count() == 5);
    REQUIRE(j.append(op(5)));  // appends go on after the swap
    CHECK(j.count() == 6);
    REQUIRE(j.compact(2));  // below the base: nothing to drop
    CHECK(j.base() == 3);
  }
  CHECK(slurp(file).rfind("{\"op\":\"base\",\"ops\":3}\n", 0) == 0);
  CHECK_FALSE(fs::exists(d.path / "ops.jsonl.tmp"));
  {
    search::OpJournal j;
    auto ops = j.open(file);
    REQUIRE(ops);
    REQUIRE(ops->size() == 3);
    CHECK((*ops)[0] == op(3));
    CHECK((*ops)[2] == op(5));
    CHECK(j.base() == 3);
    CHECK(j.count() == 6);
    REQUIRE(j.compact(100));  // past the end: everything goes, the numbering stays
    CHECK(j.base() == 6);
    CHECK(j.count() == 6);
    REQUIRE(j.append(op(6)));
  }
  search::OpJournal j;
  auto ops = j.open(file);
  REQUIRE(ops);
  REQUIRE(ops->size() == 1);
  CHECK((*ops)[0] == op(6));
  CHECK(j.count() == 7);
}

TEST_CASE("op journal: a torn last line is cut, a bad header ends the history", "[search]") {
  ScratchDir d;
  fs::path file = d.path / "ops.jsonl";
  {
    std::ofstream out(file);
    out << "{\"op\":\"base\",\"ops\":10}\n" << op(10).dump() << "\n{\"op\":\"resu";
  }
  {
    search::OpJournal j;
    auto ops = j.open(file);
    REQUIRE(ops);
    CHECK(ops->size() == 1);
    CHECK(j.count() == 11);
    REQUIRE(j.append(op(11)));
  }
  CHECK(slurp(file) ==
        "{\"op\":\"base\",\"ops\":10}\n" + op(10).dump() + "\n" + op(11).dump() + "\n");
  // A header whose count is not a count is not trusted: nothing after it is read.
  for (const char* head : {"{\"op\":\"base\",\"ops\":-1}", "{\"op\":\"base\",\"ops\":\"7\"}"}) {
    CAPTURE(head);
    {
      std::ofstream out(file, std::ios::trunc);
      out << head << "\n" << op(1).dump() << "\n";
    }
    search::OpJournal j;
    auto ops = j.open(file);
    REQUIRE(ops);
    CHECK(ops->empty());
    CHECK(j.count() == 0);
  }
}

TEST_CASE("replay plan: the journal after the snapshot, then what even the journal missed",
          "[search]") {
  using search::ext::plan_replay;
  auto suggest = [](const char* id) { return json{{"op", "suggest"}, {"trial_id", id}}; };
  auto complete = [](const char* id) {
    return json{{"op", "complete"}, {"trial_id", id}, {"result", nullptr}, {"status", "ERROR"}};
  };
  // Journal ops 10..13 (compacted below 10); the snapshot saw ops up to 11.
  std::vector<json> ops = {suggest("00002"), complete("00001"), suggest("00003"),
                           complete("00002")};
  search::ext::Known known;
  known.ops = 12;
  known.suggested = {"00000", "00001", "00002"};
  known.completed = {"00000", "00001"};
  std::vector<search::KnownTrial> trials(5);
  for (int i = 0; i < 5; ++i) trials[i].id = search::ext::trial_id(i);
  trials[3].config = {{"x", 3}};
  trials[4].config = {{"x", 4}};  // suggested and finished, but the journal lost both
  trials[4].finished = true;
  trials[4].completion.trial = "00004";
  uint64_t from = 0;
  auto plan = plan_replay(ops, 10, known, trials, from);
  CHECK(from == 12);
  REQUIRE(plan.size() == 4);
  CHECK(plan[0].msg == suggest("00003"));
  CHECK(plan[0].expected == json{{"x", 3}});
  CHECK(plan[0].journaled);
  CHECK(plan[1].msg == complete("00002"));
  CHECK(plan[2].msg == suggest("00004"));
  CHECK_FALSE(plan[2].journaled);
  CHECK(plan[3].msg["op"] == "complete");
  CHECK(plan[3].msg["trial_id"] == "00004");
  // A snapshot older than the journal's first op: the journal's ops are all replayed.
  known.ops = 7;
  plan = plan_replay(ops, 10, known, trials, from);
  CHECK(from == 10);
  CHECK(plan.front().msg == suggest("00002"));
  // One newer than its end: nothing from the journal.
  known.ops = 20;
  plan = plan_replay(ops, 10, known, {}, from);
  CHECK(from == 14);
  CHECK(plan.empty());
}

// A line nested 100,000 deep (a hand or a disk error) ends the history like any bad line: read
// back as it was, it crashed the driver's resume when the replay printed it.
TEST_CASE("op journal: a line nested too deep ends the history", "[search]") {
  ScratchDir d;
  fs::path file = d.path / "ops.jsonl";
  {
    std::ofstream out(file);
    out << op(0).dump() << "\n{\"op\":\"result\",\"result\":" << std::string(100000, '[')
        << std::string(100000, ']') << "}\n"
        << op(2).dump() << "\n";
  }
  search::OpJournal j;
  auto ops = j.open(file);
  REQUIRE(ops);
  REQUIRE(ops->size() == 1);
  CHECK((*ops)[0] == op(0));
  CHECK(j.count() == 1);
  for (const auto& o : *ops) CHECK(!o.dump().empty());  // what a resume's replay does
}
