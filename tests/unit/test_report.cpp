// The report: its data read from an experiment dir, the page's escaping, the periodic refresh,
// and the experiment keys that control it.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "fake_executor.hpp"
#include "report/gather.hpp"
#include "report/html.hpp"
#include "report/refresher.hpp"
#include "spec/parse.hpp"
#include "state/state.hpp"
#include "util/fs.hpp"

using namespace tune;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kEvil = "</script><script>alert(1)</script>";

trial::Trial make_trial(int i, trial::Status st, double best_loss) {
  trial::Trial t;
  t.id = "0000" + std::to_string(i);
  t.name = "trial_" + t.id;
  t.index = static_cast<uint64_t>(i);
  t.config = {{"lr", 0.1 * (i + 1)}, {"model", {{"layers", i + 1}, {"act", "relu"}}}};
  t.status = st;
  t.iteration = 3;
  t.metrics["loss"] = {best_loss + 1, best_loss, best_loss + 2};
  trial::Checkpoint c;
  c.seq = 1;
  c.iteration = 2;
  c.metrics = {{"loss", best_loss}};
  t.checkpoints.push_back(c);
  t.checkpoint_seq = 1;
  return t;
}

// An experiment of three trials on disk: trial 1 has the lowest loss but is in ERROR, so the
// best is trial 2; trial 0's result.json has a torn line and a row without an iteration.
void write_experiment(const fs::path& dir) {
  state::ExperimentState s;
  s.name = "exp";
  s.total_trials = 3;
  s.next_index = 3;
  s.metric = "loss";
  s.mode = "min";
  s.elapsed_s = 42;
  s.trials = {make_trial(0, trial::Status::kTerminated, 0.5),
              make_trial(1, trial::Status::kError, 0.1),
              make_trial(2, trial::Status::kTerminated, 0.2)};
  REQUIRE(state::save(dir, s, false));
  for (int i = 0; i < 3; ++i) {
    fs::create_directories(dir / s.trials[i].name);
    std::ofstream out(dir / s.trials[i].name / "result.json");
    for (int it = 1; it <= 3; ++it)
      out << json{{"training_iteration", it},
                  {"loss", 1.0 / it + i},
                  {"pid", 7},
                  {"time_total_s", it}}
                 .dump()
          << "\n";
    if (i == 0)
      out << "{\"acc\": 0.5}\n{\"training_iteration\": 4, \"acc\": NaN, \"loss\": 2}\n{\"tor";
  }
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("JSON put in a script element cannot end it or break it", "[report]") {
  json j = {{kEvil, {{"a&b", "x\xE2\x80\xA8y\xE2\x80\xA9z"}, {"<!--", 1}}}, {"bad", "\xff"}};
  std::string s = report::script_safe_json(j);
  CHECK(s.find_first_of("<>&") == std::string::npos);
  CHECK(s.find("\xE2\x80\xA8") == std::string::npos);
  CHECK(s.find("\xE2\x80\xA9") == std::string::npos);
  json back = json::parse(s);
  CHECK(back[kEvil]["a&b"] == "x\xE2\x80\xA8y\xE2\x80\xA9z");
  CHECK(back[kEvil]["<!--"] == 1);
  CHECK(back["bad"] == "\xEF\xBF\xBD");  // invalid UTF-8 became U+FFFD
}

TEST_CASE("a hostile experiment name and metric leave the page with its own script tags only",
          "[report]") {
  json data = {{"name", kEvil}, {"metric", kEvil}, {"trials", json::array()}};
  std::string page = report::render_html(data);
  CHECK(count(page, "<script") == 4);  // the data, the curves, uPlot, the report's script
  CHECK(count(page, "</script") == 4);
  CHECK(page.find("alert(1)") != std::string::npos);  // present, but only as escaped text
  CHECK(page.find("<title>tune report: &lt;/script&gt;") != std::string::npos);
  CHECK(page.find("Content-Security-Policy") != std::string::npos);
  CHECK(page.find("uPlot") != std::string::npos);
}

TEST_CASE("configs flatten to config/a/b keys", "[report]") {
  json flat = report::flatten_config(
      {{"lr", 0.1}, {"model", {{"layers", 2}, {"sizes", {1, 2}}}}, {"name", "x"}});
  CHECK(flat == json{{"lr", 0.1}, {"model/layers", 2}, {"model/sizes", "[1,2]"}, {"name", "x"}});
}

TEST_CASE("a trial's curves are read column by column; bad lines are skipped", "[report]") {
  testing::ScratchDir d;
  write_experiment(d.path);
  auto s = report::read_series(d.path / "trial_00000");
  CHECK(s.rows == 4);
  CHECK(s.bad_lines == 2);  // the row without an iteration, the torn line
  CHECK(s.x == std::vector<double>{1, 2, 3, 4});
  CHECK(s.x_integer);
  CHECK(s.y["loss"] == std::vector<double>{1.0, 0.5, 1.0 / 3, 2.0});
  REQUIRE(s.y["acc"].size() == 4);
  for (double v : s.y["acc"]) CHECK(std::isnan(v));  // absent, or NaN: a gap
  CHECK_FALSE(s.y.contains("pid"));                  // bookkeeping
  CHECK_FALSE(s.y.contains("time_total_s"));         // the driver's clock
}

TEST_CASE("the report's data: counts, best trial not in ERROR, checkpoint path", "[report]") {
  testing::ScratchDir d;
  write_experiment(d.path);
  auto r = report::gather(d.path);
  REQUIRE(r);
  const json& j = r->meta;
  CHECK(j["counts"] == json{{"ERROR", 1}, {"TERMINATED", 2}});
  CHECK(j["trials"].size() == 3);
  CHECK(j["best"]["trial"] == 2);
  CHECK(j["best"]["value"] == 0.2);
  auto canon = fs::weakly_canonical(d.path);
  CHECK(j["best"]["checkpoint"] == (canon / "trial_00002" / "checkpoint_000001").string());
  CHECK(j["params"] == json{"lr", "model/act", "model/layers"});
  CHECK(j["metrics"] == json{"acc", "loss"});
  CHECK(j["trials"][1]["config"]["model/layers"] == 2);
  CHECK(j["trials"][1]["x0"] == 1);  // 1, 2, 3 sent as a run
  CHECK(j["trials"][1]["n"] == 3);
  CHECK_FALSE(j["trials"][1].contains("x"));
  CHECK(j["trials"][0]["n"] == 4);  // the row without an iteration is not counted
  CHECK(j["elapsed_s"] == 42);
}

TEST_CASE("a dir without a readable state is an error naming the file", "[report]") {
  testing::ScratchDir d;
  auto r = report::gather(d.path);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("experiment_state.json") != std::string::npos);
}

TEST_CASE("the refresher writes report.html off the caller's thread; period 0 writes nothing",
          "[report]") {
  testing::ScratchDir d;
  write_experiment(d.path);
  {
    report::Refresher off(d.path, 0);
    CHECK(off.poll(1e9).empty());
    CHECK(off.write_now().empty());
    CHECK_FALSE(fs::exists(d.path / "report.html"));
  }
  report::Refresher r(d.path, 10);
  CHECK(r.poll(100).empty());  // the first report comes one period later
  CHECK(r.write_now().empty());
  CHECK(r.written() == 1);
  auto page = util::read_file(d.path / "report.html");
  REQUIRE(page);
  CHECK(page->find("trial_00002") != std::string::npos);
  // The last report of a run tells its progress (a bar on a terminal): every trial, in order.
  std::vector<std::pair<size_t, size_t>> seen;
  CHECK(r.write_now([&](size_t done, size_t total) { seen.emplace_back(done, total); }).empty());
  CHECK(r.written() == 2);
  REQUIRE_FALSE(seen.empty());
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == std::make_pair(i + 1, seen.size()));
  // Only that report: the next one is told nothing.
  CHECK(r.write_now().empty());
  CHECK(seen.size() == seen.back().second);
}

TEST_CASE("report_period_s and tensorboard in the experiment file", "[report][spec]") {
  const std::string base = "trial: {command: [python3, train.py]}\nparam_space: {lr: 0.1}\n";
  auto e = spec::parse_experiment(base, "/tmp/exp.yaml");
  REQUIRE(e);
  CHECK(e->report_period_s == 30);
  CHECK(e->tensorboard);
  e = spec::parse_experiment(base + "report_period_s: 0\ntensorboard: false\n", "/tmp/exp.yaml");
  REQUIRE(e);
  CHECK(e->report_period_s == 0);
  CHECK_FALSE(e->tensorboard);
  auto bad = spec::parse_experiment(base + "report_period_s: -1\n", "exp.yaml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("exp.yaml:3:18: report_period_s must be") == 0);
  bad = spec::parse_experiment(base + "tensorboard: maybe\n", "exp.yaml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("exp.yaml:3:") == 0);
}

TEST_CASE("the page holds the curves as base64 of the gathered columns, in their own element",
          "[report]") {
  testing::ScratchDir d;
  write_experiment(d.path);
  auto r = report::gather(d.path);
  REQUIRE(r);
  REQUIRE_FALSE(r->series.empty());
  std::string page = report::render_html(r->meta, r->series);
  const std::string open = "<script type=\"application/octet-stream\" id=\"tune-series\">";
  size_t at = page.find(open);
  REQUIRE(at != std::string::npos);
  at += open.size();
  size_t end = page.find("</script>", at);
  REQUIRE(end != std::string::npos);
  std::string b64 = page.substr(at, end - at);
  CHECK(b64.size() == (r->series.size() + 2) / 3 * 4);
  CHECK(
      b64.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") ==
      std::string::npos);
  // Every column the metadata names lies within the bytes.
  for (const auto& t : r->meta["trials"])
    for (const auto& [k, off] : t["y"].items())
      CHECK(off.get<size_t>() + 4 * t["n"].get<size_t>() <= r->series.size());
}
