// The experiment file parser: every error located (file:line:col), with suggestions.
#include <catch2/catch.hpp>

#include "search/space.hpp"
#include "spec/parse.hpp"

using namespace tune;

namespace {
std::string error_of(const std::string& yaml, const spec::Overrides& ov = {}) {
  auto r = spec::parse_experiment(yaml, "exp.yaml", ov);
  REQUIRE_FALSE(r);
  return r.error().message;
}
spec::Experiment ok(const std::string& yaml, const spec::Overrides& ov = {}) {
  auto r = spec::parse_experiment(yaml, "/tmp/exp.yaml", ov);
  if (!r) FAIL(r.error().message);
  return *r;
}
const std::string kMin = "trial: {command: [python3, train.py]}\nparam_space: {lr: 0.1}\n";
}  // namespace

TEST_CASE("a full experiment file parses", "[spec]") {
  auto e = ok(R"(
name: mnist-sweep
storage_path: /tmp/results
trial:
  command: ["python3", "train.py", "--lr", "{lr}", "--opt={optim.name}"]
  mode: function
  env: {OMP_NUM_THREADS: 1}
  resources: {cpu: 2, gpu: 0.5}
param_space:
  lr: {loguniform: [1.0e-4, 1.0e-1]}
  momentum: {uniform: [0.8, 0.99]}
  batch_size: {choice: [32, 64, 128]}
  layers: {grid_search: [1, 2, 3]}
  seed: {randint: [0, 1000]}
  q: {quniform: [0, 10, 0.5]}
  ql: {qloguniform: [1, 100, 1]}
  noise: {randn: [0, 1]}
  optim: {name: adam, betas: [0.9, 0.999]}
num_samples: 4
seed: 42
metric: loss
mode: min
stop: {training_iteration: 100, mean_accuracy: 0.98}
time_budget_s: 3600
max_concurrent_trials: 4
checkpoint_config: {num_to_keep: 2, checkpoint_score_attribute: loss, checkpoint_score_order: min}
failure_config: {max_failures: 3, fail_fast: false}
sync_config: {syncer: rsync, sync_period: 300, sync_on_checkpoint: true, upload_dir: "s3://bucket/prefix"}
hosts:
  - local: {cpus: 2, gpus: 0}
orphan_timeout_s: 600
host_timeout_s: 120
scheduler: {type: fifo}
)");
  CHECK(e.name == "mnist-sweep");
  CHECK(e.dir() == "/tmp/results/mnist-sweep");
  CHECK(e.trial.command.size() == 5);
  CHECK(e.trial.env.at("OMP_NUM_THREADS") == "1");
  CHECK(e.trial.resources.gpu == 0.5);
  CHECK(e.space.params.size() == 8);
  CHECK(e.space.base["optim"]["name"] == "adam");
  CHECK(e.num_samples == 4);
  CHECK(*e.seed == 42);
  CHECK(e.stop.at("mean_accuracy") == 0.98);
  CHECK(*e.checkpoint.num_to_keep == 2);
  CHECK(e.checkpoint.score_order == spec::Order::kMin);
  CHECK(e.failure.max_failures == 3);
  CHECK(*e.hosts[0].cpus == 2);
}

TEST_CASE("defaults: name from the file stem, one local host, workdir = the file's dir", "[spec]") {
  auto e = ok(kMin);
  CHECK(e.name == "exp");
  CHECK(e.trial.workdir == "/tmp");
  CHECK(e.hosts.size() == 1);
  CHECK(e.trial.mode == spec::TrialMode::kFunction);
  CHECK(!e.checkpoint.num_to_keep);
}

TEST_CASE("a command string is split like a shell would, without running one", "[spec]") {
  auto e =
      ok("trial: {command: \"python3 'my script.py' --name=\\\"a b\\\" $HOME\"}\nparam_space: {x: "
         "1}\n");
  CHECK(e.trial.command ==
        std::vector<std::string>{"python3", "my script.py", "--name=a b", "$HOME"});
}

TEST_CASE("malformed YAML is reported with its position", "[spec][errors]") {
  auto msg = error_of("trial: {command: [a\nparam_space: [\n");
  CHECK(msg.rfind("exp.yaml:", 0) == 0);
  CHECK(msg.find("invalid YAML") != std::string::npos);
}

TEST_CASE("unknown keys are located and get a suggestion", "[spec][errors]") {
  CHECK(
      error_of(kMin + "checkpoint_config:\n  num_to_kep: 2\n") ==
      "exp.yaml:4:3: unknown key 'num_to_kep' in checkpoint_config (did you mean 'num_to_keep'?)");
  CHECK(error_of(kMin + "num_sample: 3\n") ==
        "exp.yaml:3:1: unknown key 'num_sample' (did you mean 'num_samples'?)");
  CHECK(error_of(kMin + "zzz: 3\n") == "exp.yaml:3:1: unknown key 'zzz'");
}

TEST_CASE("wrong types and impossible values are errors", "[spec][errors]") {
  CHECK(error_of(kMin + "num_samples: many\n") ==
        "exp.yaml:3:14: num_samples: expected an integer, got 'many'");
  CHECK(error_of(kMin + "num_samples: -1\n").find("num_samples must be at least 1") !=
        std::string::npos);
  CHECK(error_of(kMin + "mode: biggest\n").find("expected 'min' or 'max'") != std::string::npos);
  CHECK(error_of(kMin + "max_concurrent_trials: 0\n").find("at least 1") != std::string::npos);
  CHECK(error_of(kMin + "failure_config: {max_failures: -2}\n").find("-1 (retry forever)") !=
        std::string::npos);
  CHECK(error_of(kMin + "stop: {loss: low}\n").find("stop.loss: expected a number") !=
        std::string::npos);
  CHECK(error_of("trial: {command: [a], resources: {gpu: 1.5}}\nparam_space: {x: 1}\n")
            .find("fraction") != std::string::npos);
  CHECK(error_of(kMin + "stop: {a: 1}\nstop: {b: 2}\n") ==
        "exp.yaml:4:1: duplicate key 'stop' (first at line 3)");
  CHECK(error_of("trial: {command: [a]}\nparam_space: {x: 1, x: 2}\n").find("duplicate key 'x'") !=
        std::string::npos);
  CHECK(error_of("trial: {command: []}\nparam_space: {x: 1}\n").find("trial.command is empty") !=
        std::string::npos);
  CHECK(error_of("param_space: {x: 1}\n").find("missing required key 'trial'") !=
        std::string::npos);
  CHECK(error_of("").find("empty") != std::string::npos);
}

TEST_CASE("search space errors", "[spec][errors]") {
  auto with = [](const std::string& space) {
    return "trial: {command: [a]}\nparam_space:\n" + space;
  };
  CHECK(error_of("trial: {command: [a]}\nparam_space: {}\n").find("param_space is empty") !=
        std::string::npos);
  CHECK(error_of("trial: {command: [a]}\nparam_space:\n").find("param_space is empty") !=
        std::string::npos);
  CHECK(error_of(with("  lr: {uniform: [2, 1]}\n")) == "exp.yaml:3:17: uniform: lo > hi (2 > 1)");
  CHECK(error_of(with("  lr: {loguniform: [0, 1]}\n")).find("lo must be > 0 for a log scale") !=
        std::string::npos);
  CHECK(error_of(with("  lr: {loguniform: [-1, 1]}\n")).find("lo must be > 0") !=
        std::string::npos);
  CHECK(error_of(with("  lr: {uniform: [1]}\n")).find("uniform takes [lo, hi]") !=
        std::string::npos);
  CHECK(error_of(with("  n: {randint: [5, 5]}\n")).find("lo must be < hi") != std::string::npos);
  CHECK(error_of(with("  n: {randint: [0.5, 5]}\n")).find("expected an integer") !=
        std::string::npos);
  CHECK(error_of(with("  q: {quniform: [0, 1, 0]}\n")).find("q must be > 0") != std::string::npos);
  CHECK(error_of(with("  c: {choice: []}\n")).find("non-empty list") != std::string::npos);
  CHECK(error_of(with("  g: {grid_search: 3}\n")).find("non-empty list") != std::string::npos);
  CHECK(error_of(with("  lr: {logunifrom: [1, 2]}\n")).find("did you mean 'loguniform'") !=
        std::string::npos);
  CHECK(error_of(with("  a.b: 1\n")).find("contain no '.'") != std::string::npos);
}

TEST_CASE("placeholders must name config keys", "[spec][errors]") {
  CHECK(error_of("trial: {command: [a, \"{lrr}\"]}\nparam_space: {lr: 1}\n") ==
        "exp.yaml:1:22: trial.command: placeholder '{lrr}' names no key of param_space (did you "
        "mean '{lr}'?)");
  CHECK(error_of("trial: {command: [a, \"{lr\"]}\nparam_space: {lr: 1}\n").find("unclosed '{'") !=
        std::string::npos);
  auto e =
      ok("trial: {command: [a, \"{{lit}}\", \"{opt.lr}\"]}\nparam_space: {opt: {lr: 1, m: 2}}\n");
  CHECK(e.trial.command[1] == "{{lit}}");
}

TEST_CASE("checkpoint_frequency / checkpoint_at_end in function mode say why", "[spec][errors]") {
  CHECK(error_of(kMin + "checkpoint_config: {checkpoint_frequency: 5}\n").find("step mode only") !=
        std::string::npos);
  CHECK(error_of(kMin + "checkpoint_config: {checkpoint_at_end: true}\n").find("step mode only") !=
        std::string::npos);
  auto e =
      ok("trial: {command: [a], mode: step}\nparam_space: {x: 1}\ncheckpoint_config: "
         "{checkpoint_frequency: 5, checkpoint_at_end: true}\n");
  CHECK(e.checkpoint.frequency == 5);
}

TEST_CASE("set overrides (--set) replace any value by dotted path, with their own error location",
          "[spec]") {
  spec::Overrides ov;
  ov.set = {"checkpoint_config.num_to_keep=3", "num_samples=7", "param_space.lr={uniform: [0, 1]}"};
  auto e = ok(kMin, ov);
  CHECK(*e.checkpoint.num_to_keep == 3);
  CHECK(e.num_samples == 7);
  CHECK(e.space.params.size() == 1);
  ov.set = {"num_samples=abc"};
  CHECK(error_of(kMin, ov) == "--set num_samples: num_samples: expected an integer, got 'abc'");
  ov.set = {"checkpoint_config.num_to_kep=3"};
  CHECK(error_of(kMin, ov).find("did you mean 'num_to_keep'") != std::string::npos);
  ov.set = {"novalue"};
  CHECK(error_of(kMin, ov).find("expected KEY=VALUE") != std::string::npos);
}

TEST_CASE("names must be safe directory names", "[spec][errors]") {
  CHECK(error_of("name: ../evil\n" + kMin).find("name '../evil' must be") != std::string::npos);
  CHECK(error_of("name: a/b\n" + kMin).find("must be") != std::string::npos);
  spec::Overrides ov;
  ov.name = "..";
  CHECK(error_of(kMin, ov).find("--name") != std::string::npos);
}

TEST_CASE("hosts are validated", "[spec][errors]") {
  CHECK(error_of(kMin + "hosts: [{lokal: {}}]\n").find("did you mean 'local'") !=
        std::string::npos);
  CHECK(error_of(kMin + "hosts: [{ssh: {user: u}}]\n").find("missing required key 'host'") !=
        std::string::npos);
  CHECK(error_of(kMin + "hosts: [{ssh: {host: \"a;rm -rf /\"}}]\n").find("not a host name") !=
        std::string::npos);
  CHECK(error_of(kMin + "hosts: [{ssh: {host: h, port: 70000}}]\n").find("1..65535") !=
        std::string::npos);
  auto e =
      ok(kMin + "hosts: [{local: {cpus: 2}}, {ssh: {host: 10.0.0.2, user: ubuntu, gpus: 2}}]\n");
  CHECK(e.hosts.size() == 2);
  CHECK(e.hosts[1].known_hosts_file == "~/.ssh/known_hosts");
}

TEST_CASE("slurm hosts are parsed and validated", "[spec][errors][slurm]") {
  auto e = ok(kMin +
              "hosts:\n  - slurm: {partition: gpu, account: proj, time_limit: \"04:00:00\", cpus: "
              "4, gpus: 1, mem: 16G, max_jobs: 32, sbatch_args: [\"--qos=normal\"], "
              "signal_grace_s: 120}\n");
  REQUIRE(e.hosts.size() == 1);
  const auto& s = e.hosts[0].slurm;
  CHECK(e.hosts[0].kind == spec::HostSpec::Kind::kSlurm);
  CHECK(s.partition == "gpu");
  CHECK(s.account == "proj");
  CHECK(s.time_limit == "04:00:00");
  CHECK(*s.cpus == 4);
  CHECK(*s.gpus == 1);
  CHECK(s.mem == "16G");
  CHECK(s.max_jobs == 32);
  CHECK(s.sbatch_args == std::vector<std::string>{"--qos=normal"});
  CHECK(s.signal_grace_s == 120);
  CHECK_FALSE(e.trial.sync_workdir);
  auto err = [](const std::string& body) {
    return error_of(kMin + "hosts: [{slurm: " + body + "}]\n");
  };
  CHECK(err("{partition: \"a b\"}").find("not a Slurm partition") != std::string::npos);
  CHECK(err("{partition: \"--wrap=x\"}").find("not a Slurm partition") != std::string::npos);
  CHECK(err("{time_limit: \"1h\"}").find("not a Slurm time_limit") != std::string::npos);
  CHECK(err("{max_jobs: 0}").find("1..100000") != std::string::npos);
  CHECK(err("{signal_grace_s: 0}").find("1..65535") != std::string::npos);
  CHECK(err("{sbatch_args: [qos]}").find("is not an option") != std::string::npos);
  CHECK(err("{sbatch_args: --qos=x}").find("must be a list") != std::string::npos);
  CHECK(err("{partiton: gpu}").find("did you mean 'partition'") != std::string::npos);
  CHECK(error_of(kMin + "hosts: [{slurm: {}}, {ssh: {host: h}}]\n").find("cannot be listed") !=
        std::string::npos);
  CHECK(error_of(kMin + "hosts: [{slurm: {}}, {slurm: {}}]\n").find("only one 'slurm'") !=
        std::string::npos);
  CHECK(error_of("trial: {command: [python3, t.py], mode: step}\nparam_space: {lr: 0.1}\n"
                 "hosts: [{slurm: {}}]\n")
            .find("not supported on a 'slurm' host") != std::string::npos);
}

TEST_CASE("a resume may change only stop, budget, concurrency, retention, sync and timeouts",
          "[spec]") {
  auto eff = [](const std::string& extra) {
    auto r = spec::parse_experiment(kMin + extra, "/tmp/exp.yaml");
    if (!r) FAIL(r.error().message);
    return r->effective;
  };
  auto base = eff("stop: {training_iteration: 5}\ncheckpoint_config: {num_to_keep: 2}\n");
  CHECK(!spec::forbidden_change(
      base, eff("stop: {training_iteration: 50}\ncheckpoint_config: {num_to_keep: 3}\n"
                "time_budget_s: 60\nmax_concurrent_trials: 2\norphan_timeout_s: 5\n")));
  CHECK(spec::changed_keys(
            base, eff("stop: {training_iteration: 50}\ncheckpoint_config: {num_to_keep: 2}\n")) ==
        std::vector<std::string>{"stop"});
  CHECK(spec::forbidden_change(base, eff("stop: {training_iteration: 5}\ncheckpoint_config: "
                                         "{num_to_keep: 2}\nnum_samples: 3\n")) == "num_samples");
  auto other = spec::parse_experiment(
      "trial: {command: [python3, other.py]}\nparam_space: {lr: 0.1}\n"
      "stop: {training_iteration: 5}\ncheckpoint_config: {num_to_keep: 2}\n",
      "/tmp/e.yaml");
  REQUIRE(other);
  CHECK(spec::forbidden_change(base, other->effective) == "trial");
  CHECK(
      spec::forbidden_change(
          base,
          eff("stop: {training_iteration: 5}\ncheckpoint_config: {num_to_keep: 2}\nname: moved\n"))
          .has_value() == false);
}

TEST_CASE("a self-referential alias is refused before any tree walk", "[spec][errors]") {
  CHECK(error_of(kMin + "stop: &x [*x]\n") ==
        "exp.yaml:3:11: recursive alias '*x': the anchored node contains its own alias");
  CHECK(error_of(kMin + "stop: &x {a: {b: *x}}\n").find("exp.yaml:3:") == 0);
  spec::Overrides ov;
  ov.set = {"stop=&y [1, *y]"};
  CHECK(error_of(kMin, ov) ==
        "--set stop: recursive alias '*y': the anchored node contains its own alias");
}

TEST_CASE("an alias bomb is refused by its expanded size", "[spec][errors]") {
  // "billion laughs": 9 levels of 10 aliases = 10^9 nodes from a few hundred bytes
  std::string yaml = kMin + "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    std::string p = "*a" + std::to_string(i - 1);
    yaml += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) yaml += (k ? ", " : "") + p;
    yaml += "]\n";
  }
  auto err = error_of(yaml);
  CHECK(err.find("exp.yaml:") == 0);
  CHECK(err.find("expands to more than 1,000,000 nodes") != std::string::npos);
  // bytes: few nodes, long strings
  std::string big(1 << 20, 'z');
  std::string bytes = kMin + "s: &s \"" + big + "\"\nt: [";
  for (int k = 0; k < 70; ++k) bytes += (k ? ", " : "") + std::string("*s");
  CHECK(error_of(bytes + "]\n").find("expands to more than 64 MiB") != std::string::npos);
  // depth: aliases of nested lists nest deeper than the text does
  std::string deep = kMin + "d0: &d0 " + std::string(400, '[') + std::string(400, ']') + "\n";
  for (int i = 1; i <= 3; ++i)
    deep += "d" + std::to_string(i) + ": &d" + std::to_string(i) + " " + std::string(400, '[') +
            "*d" + std::to_string(i - 1) + std::string(400, ']') + "\n";
  CHECK(error_of(deep).find("nests deeper than 1000 levels") != std::string::npos);
  // A few aliases of a small anchor are fine.
  auto e = ok("trial: {command: [a]}\nparam_space: {x: &v [1, 2], y: *v, z: {grid_search: *v}}\n");
  CHECK(e.space.base["y"] == nlohmann::json({1, 2}));
}

TEST_CASE("strings must be UTF-8 without NUL bytes, in the file and in --set", "[spec][errors]") {
  CHECK(error_of("trial: {command: [a]}\nparam_space: {a: \"x\xffy\"}\n") ==
        "exp.yaml:2:20: not valid UTF-8 text");
  // An escape can make a NUL (which cuts argv words and paths); a lone surrogate is yaml-cpp's
  // own error.
  CHECK(error_of("trial: {command: [a]}\nparam_space: {a: \"x\\ud800y\"}\n")
            .starts_with("exp.yaml:2:"));
  CHECK(error_of("trial: {command: [a]}\nparam_space: {a: \"a\\0b\"}\n") ==
        "exp.yaml:2:18: a string holds a NUL byte (\\0), which no argument, path or environment "
        "value can carry");
  CHECK(
      error_of("trial: {command: [\"a\\0b\"]}\nparam_space: {a: 1}\n").starts_with("exp.yaml:1:"));
  CHECK(error_of(kMin + "# caf\xe9\n").starts_with("exp.yaml:3:6: not valid UTF-8"));
  spec::Overrides ov;
  ov.set = {"param_space.a=\"x\xffy\""};
  CHECK(error_of(kMin, ov) == "--set param_space.a: not valid UTF-8 text");
  ov.set = {"param_space.a=\"x\\0y\""};
  CHECK(error_of(kMin, ov).starts_with("--set param_space.a: a string holds a NUL byte"));
  ov.set = {"param_space.\xff=1"};
  CHECK(error_of(kMin, ov).find("not valid UTF-8") != std::string::npos);
  // UTF-8 itself is welcome.
  auto e = ok("trial: {command: [a]}\nparam_space: {a: \"caf\xc3\xa9 \xe2\x82\xac\"}\n");
  CHECK(e.space.base["a"] == "caf\xc3\xa9 \xe2\x82\xac");
}

TEST_CASE("num_samples x grid may not wrap around 64 bits", "[spec][errors]") {
  // 3689348814741910324 x 5 = 2^64 + 4: it used to run 4 trials.
  CHECK(error_of("trial: {command: [a]}\nparam_space: {g: {grid_search: [1, 2, 3, 4, 5]}}\n"
                 "num_samples: 3689348814741910324\n") ==
        "exp.yaml:3:14: num_samples x grid sizes yields more than 2^64 trials; the limit is "
        "10,000,000");
  // The grids alone can overflow too: 16 grids of 16 values = 2^64.
  std::string grids = "trial: {command: [a]}\nparam_space:\n";
  for (int g = 0; g < 16; ++g)
    grids +=
        "  g" + std::to_string(g) + ": {grid_search: [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}\n";
  CHECK(error_of(grids).find("more than 2^64 trials") != std::string::npos);
  CHECK(error_of("trial: {command: [a]}\nparam_space: {g: {grid_search: [1, 2]}}\n"
                 "num_samples: 5000001\n")
            .find("yields 10000002 trials") != std::string::npos);
  CHECK(search::trial_count(ok("trial: {command: [a]}\nparam_space: {g: {grid_search: [1, 2]}}\n"
                               "num_samples: 5000000\n")
                                .space,
                            5000000) == 10000000);
}

TEST_CASE("trial.sync_workdir: on for SSH hosts that sync with rsync, else off or an error",
          "[spec]") {
  const std::string ssh = "hosts: [{ssh: {host: h}}]\n", space = "param_space: {lr: 0.1}\n";
  auto trial = [](const std::string& extra) {
    return "trial: {command: [python3, train.py]" + extra + "}\n";
  };
  CHECK_FALSE(ok(trial("") + space).trial.sync_workdir);
  CHECK(ok(trial("") + space + ssh).trial.sync_workdir);
  CHECK_FALSE(ok(trial(", sync_workdir: false") + space + ssh).trial.sync_workdir);
  CHECK_FALSE(ok(trial(", sync_workdir: true") + space).trial.sync_workdir);  // no SSH host
  CHECK_FALSE(ok(trial("") + space + ssh + "sync_config: {syncer: none}\n").trial.sync_workdir);
  CHECK(error_of(trial(", sync_workdir: true") + space + ssh + "sync_config: {syncer: none}\n")
            .find("needs sync_config.syncer: rsync") != std::string::npos);
  CHECK(error_of(trial(", sync_workdir: maybe") + space + ssh).find("trial.sync_workdir") !=
        std::string::npos);
}

TEST_CASE("schedulers: their options parsed, bad ones refused with the place", "[spec][sched]") {
  auto e = ok(kMin +
              "metric: acc\nmode: max\n"
              "scheduler: {type: asha, max_t: 27, grace_period: 1, reduction_factor: 3}\n");
  CHECK(e.scheduler.kind == spec::SchedulerKind::kAsha);
  CHECK(e.scheduler.metric == "acc");
  CHECK(e.scheduler.mode == spec::Order::kMax);
  CHECK(e.scheduler.max_t == 27);
  CHECK(e.scheduler.reduction_factor == 3);
  CHECK(e.scheduler.time_attr == "training_iteration");
  auto h = ok(kMin + "scheduler: {type: hyperband, metric: loss, mode: min}\n");
  CHECK(h.scheduler.max_t == 81);  // Ray's defaults
  CHECK(h.scheduler.reduction_factor == 3);
  // Without a metric, or without a mode, a scheduler cannot compare trials.
  CHECK(error_of(kMin + "scheduler: {type: asha}\n") ==
        "exp.yaml:3:12: scheduler 'asha' needs a metric to compare trials by: set 'metric' (and "
        "'mode') in the experiment or the scheduler");
  CHECK(error_of(kMin + "metric: acc\nscheduler: {type: median_stopping}\n")
            .find("needs a mode: add 'mode: max'") != std::string::npos);
  const std::string mm = kMin + "metric: acc\nmode: max\n";
  CHECK(error_of(mm + "scheduler: {type: asha, grace_period: 10, max_t: 5}\n") ==
        "exp.yaml:5:39: scheduler.grace_period (10) must not exceed max_t (5)");
  CHECK(error_of(mm + "scheduler: {type: asha, reduction_factor: 1}\n") ==
        "exp.yaml:5:43: scheduler.reduction_factor must be greater than 1, got 1");
  CHECK(error_of(mm + "scheduler: {type: ashaa}\n").find("did you mean 'asha'?") !=
        std::string::npos);
  CHECK(error_of(mm + "scheduler: {type: hyperband, grace_period: 2}\n") ==
        "exp.yaml:5:30: scheduler 'hyperband' has no option 'grace_period'");
  CHECK(error_of(mm + "scheduler: {type: asha, max_t: -3}\n") ==
        "exp.yaml:5:32: scheduler.max_t must be a positive number");
}

TEST_CASE("pbt: its options parsed; a mutation absent from param_space joins it", "[spec][pbt]") {
  auto e = ok(kMin +
              "metric: acc\nmode: max\n"
              "scheduler:\n"
              "  type: pbt\n"
              "  perturbation_interval: 4\n"
              "  quantile_fraction: 0.5\n"
              "  resample_probability: 0.1\n"
              "  burn_in_period: 2\n"
              "  perturbation_factors: [1.5, 0.5]\n"
              "  hyperparam_mutations:\n"
              "    lr: {loguniform: [1.0e-4, 1.0e-1]}\n"
              "    bs: [16, 32, 64]\n"
              "    opt: {momentum: {uniform: [0.8, 0.99]}}\n");
  const auto& s = e.scheduler;
  CHECK(s.kind == spec::SchedulerKind::kPbt);
  CHECK(s.perturbation_interval == 4);
  CHECK(s.quantile_fraction == 0.5);
  CHECK(s.resample_probability == 0.1);
  CHECK(s.burn_in_period == 2);
  CHECK(s.perturbation_factors == std::vector<double>{1.5, 0.5});
  REQUIRE(s.mutations.size() == 3);
  CHECK(s.mutations[0].path == std::vector<std::string>{"lr"});
  CHECK(s.mutations[0].domain.kind == search::Domain::Kind::kLogUniform);
  CHECK(s.mutations[1].domain.kind == search::Domain::Kind::kChoice);
  CHECK(s.mutations[1].domain.values == nlohmann::json::array({16, 32, 64}));
  CHECK(s.mutations[2].path == std::vector<std::string>{"opt", "momentum"});
  // lr is a constant of param_space (kept); bs and opt.momentum were absent: sampled.
  REQUIRE(e.space.params.size() == 2);
  CHECK(e.space.params[0].path == std::vector<std::string>{"bs"});
  CHECK(e.space.params[1].path == std::vector<std::string>{"opt", "momentum"});
  auto d = ok(kMin +
              "metric: acc\nmode: max\n"
              "scheduler: {type: pbt, hyperparam_mutations: {lr: [0.1, 0.2]}}\n");
  CHECK(d.scheduler.perturbation_interval == 60);  // Ray's defaults
  CHECK(d.scheduler.quantile_fraction == 0.25);
  CHECK(d.scheduler.resample_probability == 0.25);
  CHECK(d.scheduler.perturbation_factors == std::vector<double>{1.2, 0.8});
}

TEST_CASE("pbt: bad options refused with the key and place", "[spec][pbt]") {
  const std::string mm = kMin + "metric: acc\nmode: max\n";
  const std::string lr = "hyperparam_mutations: {lr: [0.1, 0.2]}";
  CHECK(error_of(mm + "scheduler: {type: pbt, quantile_fraction: 0.6, " + lr + "}\n") ==
        "exp.yaml:5:43: scheduler.quantile_fraction must be in (0, 0.5], got 0.6");
  CHECK(error_of(mm + "scheduler: {type: pbt, quantile_fraction: 0, " + lr + "}\n") ==
        "exp.yaml:5:43: scheduler.quantile_fraction must be in (0, 0.5], got 0");
  CHECK(error_of(mm + "scheduler: {type: pbt, perturbation_interval: 0, " + lr + "}\n") ==
        "exp.yaml:5:47: scheduler.perturbation_interval must be a positive number, got 0");
  CHECK(error_of(mm + "scheduler: {type: pbt, resample_probability: 2, " + lr + "}\n") ==
        "exp.yaml:5:46: scheduler.resample_probability must be in [0, 1], got 2");
  CHECK(error_of(mm + "scheduler: {type: pbt, burn_in_period: -1, " + lr + "}\n") ==
        "exp.yaml:5:40: scheduler.burn_in_period must be 0 or a positive number");
  CHECK(error_of(mm + "scheduler: {type: pbt, perturbation_factors: [], " + lr + "}\n") ==
        "exp.yaml:5:46: scheduler.perturbation_factors must be a non-empty list of numbers");
  CHECK(error_of(mm + "scheduler: {type: pbt, perturbation_factors: [1.2, -1], " + lr + "}\n") ==
        "exp.yaml:5:52: scheduler.perturbation_factors: each factor must be a positive number");
  CHECK(error_of(mm + "scheduler: {type: pbt}\n")
            .starts_with("exp.yaml:5:12: scheduler 'pbt' needs 'hyperparam_mutations'"));
  CHECK(error_of(mm + "scheduler: {type: pbt, hyperparam_mutations: {lr: 0.1}}\n") ==
        "exp.yaml:5:51: scheduler.hyperparam_mutations.lr: cannot be sampled: give a "
        "distribution ({uniform: [lo, hi]}) or a list of values");
  CHECK(error_of(mm + "scheduler: {type: pbt, hyperparam_mutations: {lr: []}}\n") ==
        "exp.yaml:5:51: scheduler.hyperparam_mutations.lr: an empty list gives nothing to "
        "choose from");
  CHECK(error_of(mm + "scheduler: {type: pbt, hyperparam_mutations: {lr: {grid_search: [1, "
                      "2]}}}\n") ==
        "exp.yaml:5:52: scheduler.hyperparam_mutations.lr: grid_search cannot be sampled (use "
        "a list)");
  CHECK(error_of(mm + "scheduler: {type: pbt, hyperparam_mutations: {lr: {uniform: [2, 1]}}}\n")
            .find("uniform: lo > hi") != std::string::npos);
  CHECK(error_of(kMin + "scheduler: {type: pbt, " + lr + "}\n")
            .find("scheduler 'pbt' needs a metric") != std::string::npos);
  CHECK(error_of(mm + "scheduler: {type: pbt, max_t: 3, " + lr + "}\n") ==
        "exp.yaml:5:24: scheduler 'pbt' has no option 'max_t'");
  CHECK(error_of(mm + "scheduler: {type: asha, perturbation_interval: 3}\n") ==
        "exp.yaml:5:25: scheduler 'asha' has no option 'perturbation_interval'");
}
