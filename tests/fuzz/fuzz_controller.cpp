// Fuzz target: the controller's whole path for trial output, through its public API only
// (Controller ctor, run()). A scripted FakeExecutor trial prints the fuzzed bytes.
//   function mode (fuzz_controller): byte 0 picks the chunk size and exit code; the rest is the
//     trial's stdout, delivered in chunks, by both attempts of each of 2 trials.
//   step mode (fuzz_step, TUNE_FUZZ_STEP): each line of the input answers the next command
//     (step, save, stop) the driver sends on stdin.
// A result naming a "checkpoint" is pointed at a fresh dir inside the trial's own dir before the
// controller sees it, so a fuzzed path never makes the driver move files outside the scratch dir
// (what the driver does with foreign paths is tested by unit tests, not here).
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control/controller.hpp"
#include "fake_executor.hpp"
#include "fuzz_target.hpp"
#include "spec/parse.hpp"
#include "trial/result_line.hpp"

namespace {

using namespace tune;
using testing::FakeContext;
using testing::FakeProcess;

#ifdef TUNE_FUZZ_STEP
constexpr const char* kMode = "step";
#else
constexpr const char* kMode = "function";
#endif

// The experiment every input runs: two trials, retries, retention, a stop rule, a budget.
spec::Experiment make_experiment(const std::filesystem::path& dir) {
  std::string yaml =
      std::string("name: fuzz\ntrial: {command: [\"train\"], mode: ") + kMode +
      "}\n"
      "param_space: {x: {grid_search: [1, 2]}}\n"
      "metric: loss\nmode: min\n"
      "stop: {training_iteration: 40}\ntime_budget_s: 600\n"
      "checkpoint_config: {num_to_keep: 2, checkpoint_score_attribute: loss" +
      (std::string(kMode) == "step" ? ", checkpoint_frequency: 3, checkpoint_at_end: true}\n"
                                    : "}\n") +
      "failure_config: {max_failures: 1}\n";
  spec::Overrides ov;
  ov.storage_path = (dir / "results").string();
  auto e = spec::parse_experiment(yaml, dir / "exp.yaml", ov);
  if (!e) fuzz::finding("the fixed experiment does not parse: " + e.error().message);
  return *e;
}

// `line` as the controller would take it, with a reported checkpoint path replaced by a fresh
// dir inside the trial dir.
std::string confine_checkpoint(FakeContext& c, std::string line, int& made) {
  std::string_view view = line;
  if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
  auto r = trial::parse_result_line(view);
  if (!r || !r->contains("checkpoint")) return line;
  if ((*r)["checkpoint"].is_string())
    (*r)["checkpoint"] = c.make_dir("ck_" + std::to_string(++made));
  return r->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    auto [line, rest] = fuzz::split_at(text, "\n");
    lines.emplace_back(line);
    text = rest;
  }
  return lines;
}

// Function mode: prints the input in chunks, one chunk per tick, then exits.
struct Printer : FakeProcess {
  std::vector<std::string> lines;
  size_t chunk, next = 0;
  int code, made = 0;
  std::string out;
  Printer(std::vector<std::string> l, size_t ch, int co)
      : lines(std::move(l)), chunk(ch), code(co) {}
  void on_start(FakeContext& c) override {
    for (size_t i = 0; i < lines.size(); ++i)
      out += confine_checkpoint(c, lines[i], made) + (i + 1 < lines.size() ? "\n" : "");
  }
  void on_tick(FakeContext& c, double) override {
    if (next >= out.size()) return c.exit(code);
    c.print_raw(out.substr(next, chunk));
    next += chunk;
  }
};

// Step mode: each command gets the next line as its answer; out of lines, it exits.
struct Answerer : FakeProcess {
  std::vector<std::string> lines;
  size_t next = 0;
  int made = 0, idle = 0;
  explicit Answerer(std::vector<std::string> l) : lines(std::move(l)) {}
  void on_stdin(FakeContext& c, const std::string&) override {
    idle = 0;
    if (next >= lines.size()) return c.exit(0);
    c.print(confine_checkpoint(c, lines[next++], made));
  }
  void on_tick(FakeContext& c, double) override {
    if (++idle > 50) c.exit(3);  // an answer the driver did not take: give up
  }
};

// A scratch dir per input, on tmpfs when there is one: the driver fsyncs its state, which
// costs milliseconds on a disk and nothing on tmpfs.
struct ShmScratch {
  std::filesystem::path path;
  ShmScratch() {
    std::string tmpl = std::filesystem::is_directory("/dev/shm") ? "/dev/shm/tune-fuzz-XXXXXX"
                                                                 : "/tmp/tune-fuzz-XXXXXX";
    path = ::mkdtemp(tmpl.data());
  }
  ~ShmScratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  spdlog::set_level(spdlog::level::off);
  ShmScratch dir;
  auto lines = split_lines(fuzz::as_text(data + 1, size - 1));
  size_t chunk = 1 + data[0] % 61;
  int code = data[0] >> 6;  // 0..3
  testing::FakeExecutor ex([&](const exec::Launch&) -> std::unique_ptr<FakeProcess> {
#ifdef TUNE_FUZZ_STEP
    (void)chunk, (void)code;
    return std::make_unique<Answerer>(lines);
#else
    return std::make_unique<Printer>(lines, chunk, code);
#endif
  });
  control::ControllerOptions o;
  o.grace_s = 2;
  control::ResourcePool::Host h;
  h.name = "local";
  h.cpus = h.cpu_free = 2;
  o.hosts = {h};
  try {
    spec::Experiment e = make_experiment(dir.path);
    control::Controller c(e, ex, o);
    int rc = c.run();
    if (rc != kExitOk && rc != kExitTrialError) fuzz::finding("unexpected exit code");
    auto s = state::load(e.dir());
    if (!s) fuzz::finding("the state written cannot be read back: " + s.error().message);
    if (s->trials.size() != c.state().trials.size()) fuzz::finding("trials lost in the state");
  } catch (const Fatal&) {
    // the documented error type (e.g. the scratch disk is full)
  } catch (const std::exception& ex) {
    fuzz::finding(std::string("the controller threw: ") + ex.what());
  }
  return 0;
}
