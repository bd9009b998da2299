// Searchers choose each new trial's config (docs/SEARCH.md). `random` is the grid × samples
// expansion of the search space; `tpe` a model of the finished trials' results (search/tpe.hpp).
// A searcher is a pure unit: the controller asks it for configs and tells it how trials ended.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "search/bohb.hpp"
#include "search/space.hpp"
#include "search/tpe.hpp"
#include "util/error.hpp"

namespace tune::search {

enum class SearcherKind { kRandom, kTpe, kBohb, kExternal };

// An external searcher: a long-lived process speaking JSON lines (search/external.hpp).
struct ExternalOptions {
  std::vector<std::string> command;  // argv, run without a shell
  double timeout_s = 60;             // longest wait for one answer before it counts as a hang
};

// What bohb reads of each result: the scheduler's rungs, time_attr and metric (the scheduler's).
struct BohbTarget {
  std::vector<double> budgets;  // sched::budgets() of the experiment's scheduler
  std::string time_attr = "training_iteration";
  std::string metric;
  bool maximize = false;
};

// The search_alg section of an experiment.
struct SearcherSpec {
  SearcherKind kind = SearcherKind::kRandom;
  TpeOptions tpe;
  BohbOptions bohb;
  BohbTarget bohb_target;  // set from the scheduler when the experiment is parsed
  ExternalOptions external;
  // Configs to run first, in order (Ray's points_to_evaluate); parameters a point leaves out
  // are drawn as random search draws them. Every searcher is told their results.
  std::vector<json> points_to_evaluate;
  std::optional<int64_t> max_concurrent;  // running trials at most (Ray's ConcurrencyLimiter)
  // An earlier experiment whose finished trials warm the searcher (absolute).
  std::optional<std::filesystem::path> restore_from;
};

// Where and for what an external searcher runs (filled in by the controller).
struct SearcherContext {
  std::filesystem::path experiment_dir;    // its state and log live here
  std::filesystem::path cwd;               // the trials' workdir
  std::map<std::string, std::string> env;  // added to the driver's (PYTHONPATH)
  std::optional<std::string> metric;
  std::string mode = "min";
};

// A trial that ended, as the searcher is told: `value` is its metric oriented so that lower is
// better (nullopt: none, or it failed); `result` its last result (null if none).
struct Completion {
  std::string trial;
  json config;
  std::optional<double> value;
  json result;
  bool error = false;
};

// A trial the experiment state holds, given to start() on a resume.
struct KnownTrial {
  std::string id;
  json config;
  bool finished = false;
  Completion completion;  // when finished
  bool suggested = true;  // false: a point_to_evaluate, not the searcher's
};

// What a searcher answers when asked for a new trial's config.
struct Suggestion {
  enum class Kind { kConfig, kWait, kFinished } kind = Kind::kConfig;
  json config;                                        // with kConfig
  std::vector<std::pair<std::string, json>> varying;  // dotted path -> value (trial names)
};

class Searcher {
 public:
  virtual ~Searcher() = default;
  // The config of trial `index` (0-based, in creation order). An asynchronous searcher may
  // answer kWait ("not yet"): the controller asks again on a later turn of its loop.
  [[nodiscard]] virtual Suggestion suggest(uint64_t index) = 0;
  // A trial reported an intermediate result.
  virtual void on_result(const std::string& /*trial*/, const json& /*result*/) {}
  // A trial ended.
  virtual void on_complete(const Completion& c) = 0;
  // Its state, saved with the experiment state; restore() refuses one that is not its own.
  [[nodiscard]] virtual json save() const = 0;
  [[nodiscard]] virtual Result<void> restore(const json& state) = 0;

  // For searchers that run beside the controller (external); the defaults suit pure ones.
  // Called once, after restore() on a resume: `known` are the trials of the experiment state.
  [[nodiscard]] virtual Result<void> start(const std::vector<KnownTrial>& /*known*/) { return {}; }
  // Collects what arrived; true if save()'s output changed (the state should be written).
  virtual bool poll() { return false; }
  // Waiting for an answer: the controller polls again soon.
  [[nodiscard]] virtual bool busy() const { return false; }
  // The one-line error that ended it, if it failed.
  [[nodiscard]] virtual std::optional<std::string> failure() const { return std::nullopt; }
  // Before a state write: the moment to ask for a snapshot of its state (never blocks).
  virtual void prepare_save() {}
  // The state holding save()'s latest output is on disk.
  virtual void state_written() {}
  // At the end of a run: a last snapshot (blocks up to its timeout), then it stops.
  virtual void finish() {}
};

// The searcher of an experiment; fails naming what its kind cannot model (a grid for tpe), or
// an external command that is missing or not executable (search_alg.command).
[[nodiscard]] Result<std::unique_ptr<Searcher>> make_searcher(const SearcherSpec& spec,
                                                              const Space& space,
                                                              uint64_t num_samples, uint64_t seed,
                                                              const SearcherContext& ctx = {});

[[nodiscard]] const char* searcher_name(SearcherKind k);

}  // namespace tune::search
