// The external searcher's op journal: ops numbered over the experiment's life, compaction that
// drops what a snapshot holds (the file swapped in whole, with a header naming its first op),
// and reading back what a crash or a hand left in the file.
#include <catch2/catch.hpp>
#include <fstream>

#include "fake_executor.hpp"
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
