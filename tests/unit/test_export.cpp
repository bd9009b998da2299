// `tune export`: CSV quoting, column order, and the trial and result tables of an experiment.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "fake_executor.hpp"
#include "report/export.hpp"
#include "state/state.hpp"

using namespace tune;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Two trials; t1 reports loss 0.5, 0.2, 0.3 (best 0.2 at iteration 2) and has checkpoint 2 of
// loss 0.2; t2 has no result file. Configs are nested; one value needs CSV quoting.
fs::path write_experiment(const fs::path& dir) {
  state::ExperimentState s;
  s.name = "exp";
  s.total_trials = 2;
  s.next_index = 2;
  s.metric = "loss";
  s.mode = "min";
  for (int i = 0; i < 2; ++i) {
    trial::Trial t;
    t.id = "0000" + std::to_string(i);
    t.name = "trial_" + t.id;
    t.index = static_cast<uint64_t>(i);
    t.config = {{"lr", 0.5 * (i + 1)}, {"opt", {{"name", i ? "a,\"b\"" : "sgd"}}}};
    t.status = i ? trial::Status::kError : trial::Status::kTerminated;
    t.error = i ? "exit code 1" : "";
    if (i == 0) {
      t.iteration = 3;
      for (int seq : {1, 2}) {
        trial::Checkpoint c;
        c.seq = seq;
        c.iteration = seq;
        c.metrics = {{"loss", seq == 1 ? 0.5 : 0.2}};
        t.checkpoints.push_back(c);
      }
    }
    s.trials.push_back(t);
  }
  REQUIRE(state::save(dir, s, false));
  fs::create_directories(dir / "trial_00000");
  std::ofstream out(dir / "trial_00000" / "result.json");
  double loss[] = {0.5, 0.2, 0.3};
  for (int it = 1; it <= 3; ++it)
    out << json{{"training_iteration", it}, {"loss", loss[it - 1]}, {"info", {{"gpu", it}}}}.dump()
        << "\n";
  return fs::weakly_canonical(dir);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("CSV fields are quoted when they must be", "[export]") {
  CHECK(report::csv_field(nullptr).empty());
  CHECK(report::csv_field("plain") == "plain");
  CHECK(report::csv_field("a,b") == "\"a,b\"");
  CHECK(report::csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(report::csv_field("two\nlines") == "\"two\nlines\"");
  CHECK(report::csv_field(" padded") == "\" padded\"");
  CHECK(report::csv_field(0.1) == "0.1");
  CHECK(report::csv_field(true) == "true");
  CHECK(report::csv_field(json{1, 2}) == "\"[1,2]\"");
}

TEST_CASE("columns: the fixed ones first, then each group sorted", "[export]") {
  auto cols = report::column_order({"last/b", "config/z", "x", "trial_id", "config/a", "last/a"},
                                   {"trial_id", "status"}, {"config/", "last/"});
  CHECK(cols ==
        std::vector<std::string>{"trial_id", "config/a", "config/z", "last/a", "last/b", "x"});
  cols = report::column_order({"config/a", "z", "a", "trial_id"}, {"trial_id"}, {"config/", ""});
  CHECK(cols == std::vector<std::string>{"trial_id", "config/a", "a", "z"});
}

TEST_CASE("the trial table: config, last and best result, status, best checkpoint", "[export]") {
  testing::ScratchDir d;
  auto dir = write_experiment(d.path);
  std::ostringstream out;
  REQUIRE(report::export_experiment(d.path, report::ExportFormat::kJsonl, false, out));
  auto rows = lines(out.str());
  REQUIRE(rows.size() == 2);
  json a = json::parse(rows[0]), b = json::parse(rows[1]);
  CHECK(a["config/lr"] == 0.5);
  CHECK(a["config/opt/name"] == "sgd");
  CHECK(a["last/loss"] == 0.3);
  CHECK(a["last/training_iteration"] == 3);
  CHECK(a["last/info/gpu"] == 3);
  CHECK(a["best/loss"] == 0.2);
  CHECK(a["best/training_iteration"] == 2);
  CHECK(a["status"] == "TERMINATED");
  CHECK(a["best_checkpoint"] == (dir / "trial_00000" / "checkpoint_000002").string());
  CHECK(b["status"] == "ERROR");
  CHECK(b["error"] == "exit code 1");
  CHECK(b["best_checkpoint"].is_null());
  CHECK_FALSE(b.contains("last/loss"));

  std::ostringstream csv;
  REQUIRE(report::export_experiment(d.path, report::ExportFormat::kCsv, false, csv));
  auto c = lines(csv.str());
  REQUIRE(c.size() == 3);
  CHECK(
      c[0].starts_with("trial_id,trial_name,status,host,iterations,best_checkpoint,error,"
                       "config/lr,config/opt/name,last/"));  // config/, last/, best/
  CHECK(c[2].find(",\"a,\"\"b\"\"\",") != std::string::npos);

  std::ostringstream js;
  REQUIRE(report::export_experiment(d.path, report::ExportFormat::kJson, false, js));
  json all = json::parse(js.str());
  REQUIRE(all.size() == 2);
  CHECK(all[0] == a);
}

TEST_CASE("all results: every result row with its trial and config", "[export]") {
  testing::ScratchDir d;
  write_experiment(d.path);
  std::ostringstream csv;
  REQUIRE(report::export_experiment(d.path, report::ExportFormat::kCsv, true, csv));
  auto c = lines(csv.str());
  REQUIRE(c.size() == 4);
  CHECK(c[0] == "trial_id,trial_name,training_iteration,config/lr,config/opt/name,info/gpu,loss");
  CHECK(c[1] == "00000,trial_00000,1,0.5,sgd,1,0.5");
  CHECK(c[3] == "00000,trial_00000,3,0.5,sgd,3,0.3");
  std::ostringstream jl;
  REQUIRE(report::export_experiment(d.path, report::ExportFormat::kJsonl, true, jl));
  CHECK(lines(jl.str()).size() == 3);
}

TEST_CASE("export of a dir without state names the problem", "[export]") {
  testing::ScratchDir d;
  std::ostringstream out;
  auto r = report::export_experiment(d.path, report::ExportFormat::kCsv, false, out);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("experiment_state.json") != std::string::npos);
}

TEST_CASE("export tells its progress: trials read, twice each for a CSV of all results",
          "[export]") {
  testing::ScratchDir d;
  write_experiment(d.path);
  auto run = [&](report::ExportFormat f, bool all) {
    std::vector<std::pair<size_t, size_t>> seen;
    std::ostringstream out;
    REQUIRE(report::export_experiment(
        d.path, f, all, out, [&](size_t done, size_t total) { seen.emplace_back(done, total); }));
    return seen;
  };
  using P = std::vector<std::pair<size_t, size_t>>;
  CHECK(run(report::ExportFormat::kCsv, false) == P{{1, 2}, {2, 2}});
  CHECK(run(report::ExportFormat::kJson, true) == P{{1, 2}, {2, 2}});
  CHECK(run(report::ExportFormat::kCsv, true) == P{{1, 4}, {2, 4}, {3, 4}, {4, 4}});
}
