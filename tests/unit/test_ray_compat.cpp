// Ray Tune's names and layout in an experiment file, and the distributions Ray has.
#include <catch2/catch.hpp>
#include <set>

#include "search/space.hpp"
#include "spec/parse.hpp"

using namespace tune;

namespace {
const std::string kTrial = "trial: {command: [python3, train.py]}\nparam_space: {lr: 0.1}\n";

spec::Experiment ok(const std::string& yaml, const spec::Overrides& ov = {}) {
  auto r = spec::parse_experiment(yaml, "/tmp/exp.yaml", ov);
  if (!r) FAIL(r.error().message);
  return *r;
}
std::string error_of(const std::string& yaml) {
  auto r = spec::parse_experiment(yaml, "exp.yaml");
  REQUIRE_FALSE(r);
  return r.error().message;
}
bool warned(const spec::Experiment& e, const std::string& what) {
  for (const auto& w : e.warnings)
    if (w.find(what) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("Ray's old names are accepted, each with a warning naming ours", "[spec][ray]") {
  auto e = ok(kTrial +
              "keep_checkpoints_num: 3\ncheckpoint_score_attr: max-auc\ncheckpoint_freq: 0\n"
              "local_dir: /tmp/ray_results\nmetric: auc\nmode: max\n"
              "resources_per_trial: {CPU: 2, GPU: 1}\nsync_config: {syncer: null}\n");
  CHECK(e.checkpoint.num_to_keep == 3);
  CHECK(e.checkpoint.score_attribute == "auc");
  CHECK(e.checkpoint.score_order == spec::Order::kMax);
  CHECK(e.storage_path == "/tmp/ray_results");
  CHECK(e.trial.resources.cpu == 2);
  CHECK(e.trial.resources.gpu == 1);
  CHECK(e.sync.syncer == "none");
  CHECK(warned(e, "'keep_checkpoints_num' is Ray's name: use 'checkpoint_config.num_to_keep'"));
  CHECK(warned(e, "use 'checkpoint_config.checkpoint_score_attribute'"));
  CHECK(warned(e, "use 'checkpoint_config.checkpoint_frequency'"));
  CHECK(warned(e, "'local_dir' is Ray's name: use 'storage_path'"));
  CHECK(warned(e, "use 'trial.resources'"));
  CHECK(warned(e, "use 'syncer: none'"));
  CHECK(warned(e, "/tmp/exp.yaml:3:1:"));  // located: keep_checkpoints_num is on line 3
  // The spec kept for resume comparisons holds our names only.
  CHECK(e.effective["checkpoint_config"]["num_to_keep"] == 3);
  CHECK_FALSE(e.effective.contains("keep_checkpoints_num"));
  // Our own names give no warning.
  CHECK(ok(kTrial + "checkpoint_config: {num_to_keep: 2}\n").warnings.empty());
}

TEST_CASE("a min- prefix of checkpoint_score_attr sets the order", "[spec][ray]") {
  auto e = ok(kTrial + "checkpoint_score_attr: min-loss\n");
  CHECK(e.checkpoint.score_attribute == "loss");
  CHECK(e.checkpoint.score_order == spec::Order::kMin);
  // Without a prefix Ray's default order (max) applies; our own key keeps a literal name.
  CHECK(ok(kTrial + "checkpoint_score_attr: acc\n").checkpoint.score_order == spec::Order::kMax);
  CHECK(ok(kTrial + "checkpoint_config: {checkpoint_score_attribute: min-x}\n")
            .checkpoint.score_attribute == "min-x");
  CHECK_THAT(error_of(kTrial + "checkpoint_score_attr: min-loss\n"
                               "checkpoint_config: {checkpoint_score_order: max}\n"),
             Catch::Contains("contradicts the 'min-' prefix"));
}

TEST_CASE("a Ray name and ours for the same setting is an error", "[spec][ray]") {
  CHECK_THAT(error_of(kTrial + "keep_checkpoints_num: 3\ncheckpoint_config: {num_to_keep: 2}\n"),
             Catch::Contains("exp.yaml:3:1: 'keep_checkpoints_num' and "
                             "'checkpoint_config.num_to_keep' are the same setting"));
  CHECK_THAT(error_of(kTrial + "local_dir: /a\nstorage_path: /b\n"),
             Catch::Contains("are the same setting"));
  CHECK_THAT(error_of("trial: {command: [a], resources: {cpu: 1, CPU: 2}}\nparam_space: {x: 1}\n"),
             Catch::Contains("'CPU' and 'cpu' are the same resource"));
}

TEST_CASE("resources with either case of keys", "[spec][ray]") {
  auto e = ok("trial: {command: [a], resources: {CPU: 3, GPU: 0.5}}\nparam_space: {x: 1}\n");
  CHECK(e.trial.resources.cpu == 3);
  CHECK(e.trial.resources.gpu == 0.5);
  CHECK(e.warnings.empty());
}

TEST_CASE("a file laid out like Ray's Tuner is the same experiment as the flat one",
          "[spec][ray]") {
  const std::string tuner = R"(
trial: {command: [python3, train.py, "{lr}"]}
param_space: {lr: {loguniform: [0.001, 0.1]}}
tune_config:
  num_samples: 3
  metric: acc
  mode: max
  max_concurrent_trials: 2
  time_budget_s: 60
run_config:
  name: ported
  storage_path: /tmp/ported
  stop: {training_iteration: 5}
  checkpoint_config: {num_to_keep: 1}
  failure_config: {max_failures: 2}
  sync_config: {sync_period: 10}
)";
  const std::string flat = R"(
trial: {command: [python3, train.py, "{lr}"]}
param_space: {lr: {loguniform: [0.001, 0.1]}}
num_samples: 3
metric: acc
mode: max
max_concurrent_trials: 2
time_budget_s: 60
name: ported
storage_path: /tmp/ported
stop: {training_iteration: 5}
checkpoint_config: {num_to_keep: 1}
failure_config: {max_failures: 2}
sync_config: {sync_period: 10}
)";
  auto a = ok(tuner), b = ok(flat);
  CHECK(a.num_samples == 3);
  CHECK(a.metric == "acc");
  CHECK(a.mode == spec::Order::kMax);
  CHECK(a.max_concurrent_trials == 2);
  CHECK(a.name == "ported");
  CHECK(a.stop.at("training_iteration") == 5);
  CHECK(a.failure.max_failures == 2);
  CHECK(a.effective == b.effective);
  CHECK(a.warnings.empty());
  // --set reaches into the groups as well.
  CHECK(ok(tuner, spec::Overrides{{"tune_config.num_samples=5"}, {}, {}, {}}).num_samples == 5);
}

TEST_CASE("tune_config / run_config: a key given both ways, or unknown, is an error",
          "[spec][ray]") {
  CHECK_THAT(error_of(kTrial + "num_samples: 2\ntune_config: {num_samples: 3}\n"),
             Catch::Contains("exp.yaml:4:15: 'num_samples' is given both in tune_config and at "
                             "the top level (line 3)"));
  CHECK_THAT(error_of(kTrial + "run_config: {stp: {x: 1}}\n"),
             Catch::Contains("unknown key 'stp' in run_config (did you mean 'stop'?)"));
  CHECK_THAT(error_of(kTrial + "tune_config: [1]\n"),
             Catch::Contains("tune_config must be a mapping"));
}

TEST_CASE("metric without mode is an error", "[spec][ray]") {
  CHECK_THAT(error_of(kTrial + "metric: acc\n"),
             Catch::Contains("exp.yaml:3:9: metric 'acc' needs a mode"));
  CHECK_THAT(error_of(kTrial + "tune_config: {metric: acc}\n"),
             Catch::Contains("metric 'acc' needs a mode"));
  CHECK(ok(kTrial + "metric: acc\nmode: max\n").mode == spec::Order::kMax);
}

TEST_CASE("sample_from is refused with the alternatives", "[spec][ray]") {
  auto msg = error_of("trial: {command: [a]}\nparam_space: {b: {sample_from: x}}\n");
  CHECK_THAT(msg, Catch::Contains("exp.yaml:2:19: sample_from is not supported"));
  CHECK_THAT(msg, Catch::Contains("grid_search: [{a: 1, b: 2}"));
  CHECK_THAT(msg, Catch::Contains("compute them in the trial"));
}

namespace {
std::vector<nlohmann::json> draws(const std::string& domain, int n = 2000) {
  auto e = ok("trial: {command: [a]}\nnum_samples: " + std::to_string(n) +
              "\nparam_space: {v: " + domain + "}\n");
  std::vector<nlohmann::json> out;
  for (int i = 0; i < n; ++i) out.push_back(search::generate(e.space, 7, i).config["v"]);
  return out;
}
}  // namespace

TEST_CASE("lograndint: integers from lo up to hi (excluded), small ones more often",
          "[search][ray]") {
  std::set<int64_t> seen;
  int below_10 = 0;
  for (const auto& v : draws("{lograndint: [1, 100]}")) {
    REQUIRE(v.is_number_integer());
    seen.insert(v.get<int64_t>());
    below_10 += v.get<int64_t>() < 10;
  }
  CHECK(*seen.begin() == 1);
  CHECK(*seen.rbegin() <= 99);
  CHECK(below_10 > 800);  // half of the log range: ~1000 of 2000 (a uniform draw gives ~180)
}

TEST_CASE("qrandint / qlograndint: multiples of q from lo to hi, hi included", "[search][ray]") {
  std::set<int64_t> seen;
  for (const auto& v : draws("{qrandint: [0, 20, 5]}")) {
    REQUIRE(v.is_number_integer());
    seen.insert(v.get<int64_t>());
  }
  CHECK(seen == std::set<int64_t>{0, 5, 10, 15, 20});
  std::set<int64_t> logs;
  for (const auto& v : draws("{qlograndint: [1, 64, 8]}")) {
    REQUIRE(v.is_number_integer());
    logs.insert(v.get<int64_t>());
  }
  for (auto v : logs) CHECK((v % 8 == 0 && v >= 8 && v <= 64));
  CHECK(logs.count(64) == 1);  // the upper bound is reachable
  // A bound never falls outside: 7 rounds to 8 but 8 > hi, so it stays at 4.
  for (const auto& v : draws("{qrandint: [3, 7, 4]}", 300)) CHECK(v.get<int64_t>() == 4);
}

TEST_CASE("qrandn: normal draws rounded to q", "[search][ray]") {
  double sum = 0;
  auto vs = draws("{qrandn: [10, 2, 0.5]}");
  for (const auto& v : vs) {
    double d = v.get<double>();
    CHECK(std::fabs(d / 0.5 - std::round(d / 0.5)) < 1e-9);
    sum += d;
  }
  CHECK(std::fabs(sum / vs.size() - 10) < 0.3);
}

TEST_CASE("the new distributions check their arguments", "[spec][ray]") {
  auto err = [](const std::string& d) {
    return error_of("trial: {command: [a]}\nparam_space: {v: " + d + "}\n");
  };
  CHECK_THAT(err("{lograndint: [0, 10]}"), Catch::Contains("lo must be > 0 for a log scale"));
  CHECK_THAT(err("{lograndint: [5, 5]}"), Catch::Contains("lo must be < hi (hi is excluded)"));
  CHECK_THAT(err("{qrandint: [1, 10]}"), Catch::Contains("qrandint takes [lo, hi, q]"));
  CHECK_THAT(err("{qrandint: [1, 10, 0]}"), Catch::Contains("q must be > 0"));
  CHECK_THAT(err("{qrandint: [1, 10, 2.5]}"), Catch::Contains("expected an integer"));
  CHECK_THAT(err("{qrandint: [1, 3, 5]}"), Catch::Contains("no multiple of q=5 lies in [1, 3]"));
  CHECK_THAT(err("{qlograndint: [8, 4, 2]}"), Catch::Contains("lo > hi"));
  CHECK_THAT(err("{qrandn: [0, -1, 1]}"), Catch::Contains("sd must be >= 0"));
  CHECK_THAT(err("{qrandn: [0, 1, 0]}"), Catch::Contains("q must be > 0"));
}

TEST_CASE("a cloud storage_path is staged locally and mirrored there", "[spec][ray]") {
  setenv("TUNE_STORAGE_PATH", "/tmp/staging", 1);
  auto e = ok(kTrial + "storage_path: s3://bucket/runs/\nname: x\n");
  CHECK(e.storage_path == "/tmp/staging");
  CHECK(e.sync.upload_dir == "s3://bucket/runs");
  auto g = ok(kTrial, spec::Overrides{{}, {}, std::string("gs://b/p"), {}});
  CHECK(g.storage_path == "/tmp/staging");
  CHECK(g.sync.upload_dir == "gs://b/p");
  unsetenv("TUNE_STORAGE_PATH");
  CHECK_THAT(error_of(kTrial + "storage_path: s3://b/x\nsync_config: {upload_dir: s3://b/y}\n"),
             Catch::Contains("exp.yaml:3:15: storage_path 's3://b/x' is mirrored like "
                             "sync_config.upload_dir: give one of the two"));
  CHECK_THAT(error_of(kTrial + "storage_path: s3:///x\n"), Catch::Contains("names no bucket"));
}
