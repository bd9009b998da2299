// Line splitting with the length cap; result.json / progress.csv writing and truncation.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "fake_executor.hpp"
#include "trial/line_splitter.hpp"
#include "trial/result_line.hpp"
#include "trial/result_log.hpp"
#include "util/fs.hpp"

using namespace tune;
using json = nlohmann::json;

TEST_CASE("lines split across chunks, offsets count whole lines only", "[trial]") {
  trial::LineSplitter s(16);
  std::vector<std::string> lines;
  std::vector<uint64_t> overlong;
  auto on = [&](std::string_view l) { lines.emplace_back(l); };
  auto over = [&](uint64_t n) { overlong.push_back(n); };
  CHECK(s.feed("ab", on, over) == 0);
  CHECK(s.feed("c\nde", on, over) == 4);
  CHECK(s.feed("f\n\n", on, over) == 5);
  CHECK(lines == std::vector<std::string>{"abc", "def", ""});
  // A line over the cap is dropped without being buffered, and reported once.
  CHECK(s.feed(std::string(10, 'x'), on, over) == 0);
  CHECK(s.feed(std::string(100, 'x'), on, over) == 0);
  CHECK(s.pending() == 0);
  CHECK(s.feed("x\nok\n", on, over) == 111 + 1 + 3);
  CHECK(overlong == std::vector<uint64_t>{111});
  CHECK(lines.back() == "ok");
}

TEST_CASE("progress.csv widens its header when new keys appear, losing nothing", "[trial]") {
  testing::ScratchDir d;
  trial::ResultLog log;
  REQUIRE(log.open(d.path));
  log.append(json{{"training_iteration", 1}, {"loss", 0.5}});
  REQUIRE(log.flush());
  log.append(json{{"training_iteration", 2}, {"loss", 0.4}, {"acc", 0.9}, {"nested", {{"a", 1}}}});
  log.append(json{{"training_iteration", 3}, {"loss", 0.3}, {"note", "a,b \"q\""}});
  REQUIRE(log.flush());
  log.close();
  auto csv = *util::read_file(d.path / "progress.csv");
  CHECK(csv ==
        "loss,training_iteration,acc,nested/a,note\n"
        "0.5,1,,,\n"
        "0.4,2,0.9,1,\n"
        "0.3,3,,,\"a,b \"\"q\"\"\"\n");
  auto rows = trial::ResultLog::read_results(d.path);
  REQUIRE(rows);
  CHECK(rows->size() == 3);
}

TEST_CASE("a trial's first rows and its done row are written to progress.csv in place", "[trial]") {
  // The first flush writes the header into the empty file, and marking the last row done
  // rewrites that row only: no temporary file and rename (an inode each) per trial.
  testing::ScratchDir d;
  trial::ResultLog log;
  REQUIRE(log.open(d.path));
  auto inode = [&] {
    struct stat st {};
    return ::stat((d.path / "progress.csv").c_str(), &st) == 0 ? st.st_ino : ino_t{0};
  };
  auto before = inode();
  log.append(json{{"training_iteration", 1}, {"loss", 0.5}, {"done", false}});
  log.append(json{{"training_iteration", 2}, {"loss", 0.4}, {"done", false}});
  REQUIRE(log.flush());
  CHECK(inode() == before);
  REQUIRE(log.mark_last_done());
  CHECK(inode() == before);
  log.close();
  CHECK(*util::read_file(d.path / "progress.csv") ==
        "done,loss,training_iteration\nfalse,0.5,1\ntrue,0.4,2\n");
}

TEST_CASE("truncate_after keeps each iteration up to the checkpoint, a torn line is dropped",
          "[trial]") {
  testing::ScratchDir d;
  {
    trial::ResultLog log;
    REQUIRE(log.open(d.path));
    for (int i = 1; i <= 7; ++i) log.append(json{{"training_iteration", i}, {"loss", 1.0 / i}});
    REQUIRE(log.flush());
  }
  {
    std::ofstream f(d.path / "result.json", std::ios::app);
    f << "{\"training_iteration\": 8, \"lo";  // torn by a crash
  }
  size_t bad = 0;
  REQUIRE(trial::ResultLog::read_results(d.path, &bad)->size() == 7);
  CHECK(bad == 1);
  REQUIRE(trial::ResultLog::truncate_after(d.path, 5));
  auto rows = *trial::ResultLog::read_results(d.path, &bad);
  CHECK(rows.size() == 5);
  CHECK(bad == 0);
  CHECK(rows.back()["training_iteration"] == 5);
  auto csv = *util::read_file(d.path / "progress.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 6);  // header + 5 rows
  REQUIRE(trial::ResultLog::truncate_after(d.path, 0));
  CHECK(trial::ResultLog::read_results(d.path)->empty());
}

TEST_CASE("a failed result write (disk full) is reported and the rows are kept for a retry",
          "[trial]") {
  testing::ScratchDir d;
  std::filesystem::create_symlink("/dev/full", d.path / "result.json");  // every write: ENOSPC
  trial::ResultLog log;
  REQUIRE(log.open(d.path));
  log.append(json{{"training_iteration", 1}, {"loss", 0.5}});
  auto r = log.flush();
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("No space left") != std::string::npos);
  auto again = log.flush();  // still pending, still failing: not silently dropped
  REQUIRE_FALSE(again);
  CHECK(again.error().message.find("result.json") != std::string::npos);
}

TEST_CASE("truncate_after's line-count fast path writes what the full rewrite writes", "[trial]") {
  for (int64_t keep : {0, 1, 3, 6, 9}) {
    testing::ScratchDir fast, slow;
    for (const auto& dir : {fast.path, slow.path}) {
      trial::ResultLog log;
      REQUIRE(log.open(dir));
      for (int i = 1; i <= 6; ++i)
        log.append(json{{"training_iteration", i}, {"note", "line\n\"two\", three"}, {"x", i}});
      REQUIRE(log.flush());
    }
    std::vector<json> kept;
    REQUIRE(trial::ResultLog::truncate_after(fast.path, keep));
    REQUIRE(trial::ResultLog::truncate_after(slow.path, keep, &kept));
    CHECK(kept.size() == static_cast<size_t>(std::min<int64_t>(keep, 6)));
    for (const char* f : {"result.json", "progress.csv"}) {
      INFO(f << " keep " << keep);
      CHECK(*util::read_file(fast.path / f) == *util::read_file(slow.path / f));
    }
  }
}

static std::vector<int64_t> iterations_of(const std::vector<json>& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(r["training_iteration"].get<int64_t>());
  return out;
}

TEST_CASE("truncate_after falls back to parsing every row when line K is not iteration K",
          "[trial]") {
  testing::ScratchDir d;
  {
    trial::ResultLog log;
    REQUIRE(log.open(d.path));
    for (int i : {1, 2, 5, 6}) log.append(json{{"training_iteration", i}});
    REQUIRE(log.flush());
  }
  {
    std::ofstream f(d.path / "result.json", std::ios::app);
    f << "not json\n";
  }
  REQUIRE(trial::ResultLog::truncate_after(d.path, 3));
  CHECK(iterations_of(*trial::ResultLog::read_results(d.path)) == std::vector<int64_t>{1, 2});
}

TEST_CASE("a result line may hold NaN, Infinity and -Infinity (Python's json.dumps)", "[trial]") {
  trial::LineIssue issue;
  auto r =
      trial::parse_result_line(R"({"loss": NaN, "hi": Infinity, "lo": -Infinity, "i": 1})", &issue);
  REQUIRE(r);
  CHECK(issue == trial::LineIssue::kNonFinite);
  CHECK(std::isnan((*r)["loss"].get<double>()));
  CHECK((*r)["hi"].get<double>() == std::numeric_limits<double>::infinity());
  CHECK((*r)["lo"].get<double>() == -std::numeric_limits<double>::infinity());
  r = trial::parse_result_line(R"({"loss": 0.5, "note": "NaN"})", &issue);
  REQUIRE(r);
  CHECK(issue == trial::LineIssue::kNone);
  CHECK((*r)["note"] == "NaN");
}

TEST_CASE("result lines that are not UTF-8, not JSON or too deep are refused with a reason",
          "[trial]") {
  trial::LineIssue issue;
  CHECK_FALSE(trial::parse_result_line("{\"loss\": \"x\xffy\"}", &issue));
  CHECK(issue == trial::LineIssue::kNotUtf8);
  CHECK_FALSE(trial::parse_result_line("{'loss': 0.5}", &issue));  // print(dict)
  CHECK(issue == trial::LineIssue::kMalformed);
  std::string deep = "{\"a\":" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  CHECK_FALSE(trial::parse_result_line(deep, &issue));
  CHECK(issue == trial::LineIssue::kTooDeep);
  std::string deep_in_string = "{\"a\":\"" + std::string(300, '[') + "\"}";  // just text
  CHECK(trial::parse_result_line(deep_in_string, &issue));
  CHECK_FALSE(trial::parse_result_line(R"({"loss": 1e999})", &issue));
  CHECK(issue == trial::LineIssue::kTooLarge);
  CHECK_FALSE(trial::parse_result_line(R"({"a": NaN, "loss": -2e400})", &issue));  // NaN is fine
  CHECK(issue == trial::LineIssue::kTooLarge);
  CHECK_FALSE(trial::parse_result_line(R"({"x": , "loss": "1e999"})", &issue));  // in a string
  CHECK(issue == trial::LineIssue::kMalformed);
  trial::LineIssueLog log;
  CHECK(log.note(trial::LineIssue::kTooDeep, 1)->find("deeper than 256 levels") !=
        std::string::npos);
  CHECK(log.note(trial::LineIssue::kTooLarge, 2)->find("beyond a double's range") !=
        std::string::npos);
  CHECK(log.note(trial::LineIssue::kMalformed, 3)->find("not a JSON object") != std::string::npos);
  CHECK_FALSE(trial::parse_result_line("epoch 3 done", &issue));  // print debugging: no issue
  CHECK(issue == trial::LineIssue::kNone);
}

TEST_CASE("line issues are warned about sparingly: NaN once, bad lines a few times", "[trial]") {
  trial::LineIssueLog log;
  CHECK_FALSE(log.note(trial::LineIssue::kNone, 1));
  auto first = log.note(trial::LineIssue::kNonFinite, 2);
  REQUIRE(first);
  CHECK(first->find("line 2") != std::string::npos);
  CHECK_FALSE(log.note(trial::LineIssue::kNonFinite, 3));
  int said = 0;
  for (uint64_t line = 10; line < 100; ++line)
    if (auto m = log.note(trial::LineIssue::kNotUtf8, line)) {
      ++said;
      CHECK(m->find("line " + std::to_string(line)) != std::string::npos);
      CHECK(m->find("UTF-8") != std::string::npos);
    }
  CHECK(said == trial::LineIssueLog::kMaxBadLines);
}

TEST_CASE("LineSplitter numbers the lines it delivers", "[trial]") {
  trial::LineSplitter s(8);
  std::vector<uint64_t> numbers;
  auto on = [&](std::string_view) { numbers.push_back(s.lines()); };
  (void)s.feed("a\nb", on, [](uint64_t) {});
  (void)s.feed("\n0123456789\nc\n", on, [](uint64_t) {});
  CHECK(numbers == std::vector<uint64_t>{1, 2, 4});  // line 3 was over the cap
}

TEST_CASE("NaN and Infinity are NaN/Infinity in result.json and empty cells in progress.csv",
          "[trial]") {
  testing::ScratchDir d;
  {
    trial::ResultLog log;
    REQUIRE(log.open(d.path));
    log.append(json{{"training_iteration", 1}, {"loss", 0.5}});
    log.append(json{{"training_iteration", 2}, {"loss", std::nan("")}});
    log.append(json{{"training_iteration", 3}, {"loss", std::numeric_limits<double>::infinity()}});
    REQUIRE(log.flush());
  }
  CHECK(*util::read_file(d.path / "result.json") ==
        "{\"loss\":0.5,\"training_iteration\":1}\n"
        "{\"loss\":NaN,\"training_iteration\":2}\n"
        "{\"loss\":Infinity,\"training_iteration\":3}\n");
  CHECK(*util::read_file(d.path / "progress.csv") == "loss,training_iteration\n0.5,1\n,2\n,3\n");
  auto rows = trial::ResultLog::read_results(d.path);
  REQUIRE(rows);
  REQUIRE(rows->size() == 3);
  CHECK(std::isnan((*rows)[1]["loss"].get<double>()));
  CHECK(std::isinf((*rows)[2]["loss"].get<double>()));
  // Truncation after a restore keeps them (both paths).
  std::vector<json> kept;
  REQUIRE(trial::ResultLog::truncate_after(d.path, 2, &kept));
  REQUIRE(kept.size() == 2);
  CHECK(std::isnan(kept[1]["loss"].get<double>()));
  CHECK(*util::read_file(d.path / "result.json") ==
        "{\"loss\":0.5,\"training_iteration\":1}\n{\"loss\":NaN,\"training_iteration\":2}\n");
  REQUIRE(trial::ResultLog::truncate_after(d.path, 1));
  CHECK(*util::read_file(d.path / "progress.csv") == "loss,training_iteration\n0.5,1\n");
}

TEST_CASE("nested results are flattened as Ray Tune does, explicit keys win", "[trial][ray]") {
  auto r = json::parse(
      R"({"val": {"acc": 0.9, "deep": {"x": 1}}, "loss": 0.1, "val/acc": 0.5, "empty": {},
          "list": [{"a": 1}]})");
  trial::flatten_result(r);
  CHECK(r["val/acc"] == 0.5);  // the explicit top-level key is kept
  CHECK(r["val/deep/x"] == 1);
  CHECK(r["loss"] == 0.1);
  CHECK_FALSE(r.contains("val"));
  CHECK(r["empty"] == json::object());               // nothing to flatten
  CHECK(r["list"] == json::parse(R"([{"a": 1}])"));  // lists are values
}
