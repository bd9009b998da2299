// Shared pieces of the controller tests: an experiment from YAML text, controller options
// with a fixed host, and a scripted function-mode trial.
#pragma once

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <functional>

#include "control/controller.hpp"
#include "fake_executor.hpp"
#include "spec/parse.hpp"
#include "trial/result_log.hpp"

namespace tune::testing {

using json = nlohmann::json;

inline spec::Experiment make_exp(const ScratchDir& dir, const std::string& yaml) {
  spec::Overrides ov;
  ov.storage_path = (dir.path / "results").string();
  auto e = spec::parse_experiment(yaml, dir.path / "exp.yaml", ov);
  if (!e) FAIL(e.error().message);
  return *e;
}

inline control::ControllerOptions opts(double cpus = 8, int gpus = 0) {
  spdlog::set_level(spdlog::level::off);
  control::ControllerOptions o;
  o.grace_s = 2;
  control::ResourcePool::Host h;
  h.name = "local";
  h.cpus = h.cpu_free = cpus;
  h.gpu_free.assign(static_cast<size_t>(gpus), 1.0);
  o.hosts = {h};
  return o;
}

// A function-mode trial that reports `n` results (one per tick) and exits with `code`.
// `on_result(i, ctx)` may add fields; returning false from it stops reporting.
struct Reporter : FakeProcess {
  int n, code, i = 0;
  std::function<json(int, FakeContext&)> make;
  Reporter(int n_, int code_, std::function<json(int, FakeContext&)> m = nullptr)
      : n(n_), code(code_), make(std::move(m)) {}
  void on_tick(FakeContext& c, double) override {
    if (i >= n) return c.exit(code);
    ++i;
    json r = make ? make(i, c) : json{{"loss", 1.0 / i}};
    c.print(r.dump());
  }
};

inline std::vector<json> results_of(const spec::Experiment& e, const trial::Trial& t) {
  auto rows = trial::ResultLog::read_results(e.dir() / t.name);
  REQUIRE(rows);
  return *rows;
}

inline std::vector<int64_t> iterations(const std::vector<json>& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(r["training_iteration"].get<int64_t>());
  return out;
}

}  // namespace tune::testing
