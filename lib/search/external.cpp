#include "search/external.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "search/external_protocol.hpp"
#include "search/line_child.hpp"
#include "search/op_journal.hpp"
#include "search/space_json.hpp"
#include "util/clock.hpp"
#include "util/json_ext.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::search {

namespace {

using namespace ext;

using util::mono;

// Deepest answer accepted: configs nest as param_space does, a few levels.
constexpr size_t kMaxAnswerDepth = 256;

// Why `line`, which parse_json_ext() did not take as an object, is not one.
std::string not_an_object_why(std::string_view line) {
  if (util::invalid_utf8_at(line) != std::string_view::npos) return "not valid UTF-8";
  auto shape = util::json_shape(line);
  if (shape.depth > kMaxAnswerDepth)
    return "it nests deeper than " + std::to_string(kMaxAnswerDepth) + " levels";
  if (shape.overflow) return "it holds a number beyond a double's range (such as 1e999)";
  return "not a JSON object";
}

// A request for the worker thread.
struct Request {
  enum class Kind { kInit, kSuggest, kReplay, kNotify, kSave, kCompact };
  Request() = default;
  Request(Kind k, json m, uint64_t i = 0) : kind(k), msg(std::move(m)), index(i) {}
  Kind kind = Kind::kNotify;
  json msg;
  uint64_t index = 0;       // kSuggest, kReplay
  json expected;            // kReplay: the config the trial has
  std::string slot;         // kSave
  uint64_t compact_to = 0;  // kCompact: drop the journal's ops below this number
  bool replay = false;      // an op of the journal, sent again (not journaled again)
};

// What the worker hands back to the controller.
struct Answer {
  Suggestion::Kind kind = Suggestion::Kind::kWait;  // kSuggest answers
  bool saved = false;                               // a kSave answer
  uint64_t index = 0;
  TrialConfig config;
  json snapshot;  // kSave: the descriptor save() returns from now on
};

class ExternalSearcher final : public Searcher {
 public:
  ExternalSearcher(ExternalOptions o, Space space, uint64_t seed, SearcherContext ctx)
      : opts_(std::move(o)), space_(std::move(space)), seed_(seed), ctx_(std::move(ctx)) {
    for (const auto& a : opts_.command) command_text_ += (command_text_.empty() ? "" : " ") + a;
    acked_ = on_disk_ = descriptor(std::nullopt, {});
  }
  ~ExternalSearcher() override { shut_down(); }

  Suggestion suggest(uint64_t index) override {
    if (failed() || finished_) return {finished_ ? Suggestion::Kind::kFinished : kWait, {}, {}};
    if (ready_ && ready_->index == index) {
      Answer a = std::move(*ready_);
      ready_.reset();
      return {Suggestion::Kind::kConfig, std::move(a.config.config), std::move(a.config.varying)};
    }
    if (asked_ || (mono() < wait_until_ && !woken_)) return {kWait, {}, {}};
    Request r{Request::Kind::kSuggest, {{"op", "suggest"}, {"trial_id", trial_id(index)}}, index};
    enqueue(std::move(r));
    asked_ = true;
    return {kWait, {}, {}};
  }

  void on_result(const std::string& trial, const json& result) override {
    enqueue({Request::Kind::kNotify, {{"op", "result"}, {"trial_id", trial}, {"result", result}}});
  }

  void on_complete(const Completion& c) override {
    woken_ = true;  // a searcher that said "wait" is asked again now
    enqueue({Request::Kind::kNotify, complete_msg(c)});
  }

  json save() const override { return acked_; }

  Result<void> restore(const json& state) override {
    auto r = parse_descriptor(state);
    if (!r) return std::unexpected(r.error());
    known_ = std::move(r->known);
    acked_ = on_disk_ = descriptor(r->slot, known_);
    restored_slot_ = r->slot;
    return {};
  }

  Result<void> start(const std::vector<KnownTrial>& known) override;
  bool poll() override;
  [[nodiscard]] bool busy() const override {
    std::lock_guard lock(mu_);
    return asked_ || save_in_flight_ || !queue_.empty() || working_;
  }
  [[nodiscard]] std::optional<std::string> failure() const override {
    std::lock_guard lock(mu_);
    return failure_;
  }
  void prepare_save() override;
  void state_written() override;
  void finish() override;

 private:
  static constexpr auto kWait = Suggestion::Kind::kWait;
  bool failed() const { return failure().has_value(); }
  void enqueue(Request r) {
    {
      std::lock_guard lock(mu_);
      if (failure_ || stop_) return;
      queue_.push_back(std::move(r));
      ++ops_since_save_;
    }
    cv_.notify_one();
  }
  void work();
  Result<std::optional<Answer>> handle(Request& r);
  Result<json> ask(const std::string& what, const json& msg);
  Result<std::optional<Answer>> handle_suggest(Request& r, const json& answer);
  Result<std::optional<Answer>> handle_notify(Request& r);
  // The op is in the child's history now: the journal position a snapshot records moves on.
  void advance(const Request& r) {
    std::lock_guard lock(mu_);
    known_.ops = r.replay ? known_.ops + 1 : journal_.count();
  }
  // Queues the journal's ops after the snapshot, then what neither told the child.
  void queue_replay(const std::vector<json>& ops, const std::vector<KnownTrial>& known);
  void shut_down();

  ExternalOptions opts_;
  Space space_;
  uint64_t seed_;
  SearcherContext ctx_;
  std::string command_text_;
  LineChild child_;    // used by the worker thread only (after start)
  OpJournal journal_;  // likewise
  std::thread worker_;

  mutable std::mutex mu_;  // guards what both threads touch: the queue, answers, failure, known_
  std::condition_variable cv_;
  std::deque<Request> queue_;
  std::deque<Answer> answers_;
  std::optional<std::string> failure_;
  bool stop_ = false, working_ = false;
  Known known_;  // what the child has been given (the worker's view)
  uint64_t ops_since_save_ = 0;

  // The controller thread's side.
  std::optional<Answer> ready_;  // a config for the trial about to be created
  bool asked_ = false;           // a suggest is in flight
  bool finished_ = false;        // it said {"finished": true}
  double wait_until_ = 0;        // after {"wait": true}: ask again then ...
  bool woken_ = false;           // ... or once a trial completes
  bool save_in_flight_ = false;
  json acked_, on_disk_;       // descriptors: the latest acknowledged, the one on disk
  uint64_t compacted_to_ = 0;  // the journal's base asked for last
  std::optional<std::string> restored_slot_;
};

Result<void> ExternalSearcher::start(const std::vector<KnownTrial>& known) {
  std::error_code ec;
  fs::create_directories(ctx_.experiment_dir, ec);
  std::map<std::string, std::string> env = ctx_.env;
  if (auto r = child_.start(opts_.command, ctx_.cwd, env, ctx_.experiment_dir / kSearcherLog); !r)
    return fail("search_alg.command: ", r.error().message);
  json state = restored_slot_
                   ? json((ctx_.experiment_dir / kSearcherStateDir / *restored_slot_).string())
                   : json(nullptr);
  json init = {{"op", "init"},
               {"space", space_to_json(space_)},
               {"metric", ctx_.metric ? json(*ctx_.metric) : json(nullptr)},
               {"mode", ctx_.mode},
               {"seed", seed_},
               {"state", state}};
  queue_.push_back({Request::Kind::kInit, std::move(init)});
  fs::create_directories(ctx_.experiment_dir / kSearcherStateDir, ec);
  auto ops = journal_.open(ctx_.experiment_dir / kSearcherStateDir / "ops.jsonl");
  if (!ops) return fail("search_alg: ", ops.error().message);
  queue_replay(*ops, known);
  ops_since_save_ = queue_.size() > 1 ? 1 : 0;
  worker_ = std::thread([this] { work(); });
  return {};
}

void ExternalSearcher::queue_replay(const std::vector<json>& ops,
                                    const std::vector<KnownTrial>& known) {
  uint64_t from = 0;
  auto plan = plan_replay(ops, journal_.base(), known_, known, from);
  known_.ops = from;  // the worker is not started yet
  for (auto& op : plan) {
    Request r(op.suggest ? Request::Kind::kReplay : Request::Kind::kNotify, std::move(op.msg));
    r.expected = std::move(op.expected);
    r.replay = op.journaled;
    queue_.push_back(std::move(r));
  }
}

bool ExternalSearcher::poll() {
  std::deque<Answer> got;
  {
    std::lock_guard lock(mu_);
    got.swap(answers_);
  }
  bool changed = false;
  for (auto& a : got) {
    if (a.saved) {
      acked_ = std::move(a.snapshot);
      save_in_flight_ = false;
      changed = true;
      continue;
    }
    asked_ = false;
    if (a.kind == Suggestion::Kind::kConfig) {
      ready_ = std::move(a);
    } else if (a.kind == Suggestion::Kind::kFinished) {
      finished_ = true;
    } else {
      wait_until_ = mono() + 1.0;
      woken_ = false;
    }
  }
  return changed;
}

void ExternalSearcher::prepare_save() {
  if (save_in_flight_ || failed()) return;
  std::string slot;
  {
    std::lock_guard lock(mu_);
    if (ops_since_save_ == 0 || stop_) return;
    ops_since_save_ = 0;
    // Never the directory the state on disk names; and save() stops naming the one written.
    const json& d = on_disk_["dir"];
    slot = d.is_string() && d.get<std::string>().back() == 'a' ? "b" : "a";
    Request r(Request::Kind::kSave, nullptr);
    r.slot = slot;
    queue_.push_back(std::move(r));
  }
  if (acked_["dir"] != on_disk_["dir"]) acked_ = on_disk_;
  save_in_flight_ = true;
  cv_.notify_one();
}

void ExternalSearcher::state_written() {
  on_disk_ = acked_;
  // What the snapshot the state now names holds is never replayed again: the journal drops it
  // (on the worker, which owns the journal; not counted as an op for the next snapshot).
  const json& ops = on_disk_["ops"];
  if (!ops.is_number_unsigned() || ops.get<uint64_t>() <= compacted_to_) return;
  compacted_to_ = ops.get<uint64_t>();
  Request r(Request::Kind::kCompact, nullptr);
  r.compact_to = compacted_to_;
  {
    std::lock_guard lock(mu_);
    if (failure_ || stop_) return;
    queue_.push_back(std::move(r));
  }
  cv_.notify_one();
}

void ExternalSearcher::finish() {
  // A last snapshot, so the final state names everything the child was told.
  double deadline = mono() + opts_.timeout_s + 1;
  auto settle = [&] {
    while (!failed() && save_in_flight_ && mono() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      poll();
    }
  };
  settle();
  prepare_save();
  settle();
}

void ExternalSearcher::shut_down() {
  if (!worker_.joinable()) return;
  bool busy;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    // Only a compaction still runs (it needs no child): the final state names its snapshot.
    std::erase_if(queue_, [](const Request& r) { return r.kind != Request::Kind::kCompact; });
    busy = working_;
  }
  // A request in flight may wait up to timeout_s: end it now.
  if (busy && child_.pid() > 0) ::kill(-child_.pid(), SIGKILL);
  cv_.notify_one();
  worker_.join();
}

void ExternalSearcher::work() {
  while (true) {
    Request r;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (failure_ || (stop_ && queue_.empty())) break;
      r = std::move(queue_.front());
      queue_.pop_front();
      working_ = true;
    }
    Result<std::optional<Answer>> a = std::nullopt;
    try {  // nothing the child or the journal says may end the driver: it ends this searcher
      a = handle(r);
    } catch (const std::exception& e) {
      a = fail("internal error handling its answer: ", e.what());
    }
    std::lock_guard lock(mu_);
    working_ = false;
    if (!a) {
      if (!stop_)
        failure_ =
            "external searcher '" + util::printable(command_text_, 80) + "': " + a.error().message;
      queue_.clear();
      break;
    }
    if (*a) answers_.push_back(std::move(**a));
  }
  bool failed_now;
  {
    std::lock_guard lock(mu_);
    failed_now = failure_.has_value();
  }
  child_.stop(failed_now ? 0.2 : 2.0);
}

Result<json> ExternalSearcher::ask(const std::string& what, const json& msg) {
  auto said = [&](const std::string& why) {
    std::string tail = util::last_line(ctx_.experiment_dir / kSearcherLog);
    return fail(why, " while answering ", what,
                tail.empty() ? "" : "; its stderr ends: " + util::printable(tail, 160));
  };
  if (auto s = child_.send(compact(msg), opts_.timeout_s); !s) return said(s.error().message);
  auto line = child_.read_line(opts_.timeout_s, kMaxSearcherLine);
  if (!line) return said(line.error().message);
  // Depth-limited: an answer nested 100,000 deep must not exhaust the stack of whatever walks
  // or prints it later.
  json j = util::parse_json_ext(*line, kMaxAnswerDepth);
  if (!j.is_discarded() && util::has_non_finite(j))
    return fail("answered '", util::printable(*line, 120), "' to ", what,
                ": it holds NaN or Infinity");
  if (j.is_discarded() || !j.is_object())
    return fail("answered '", util::printable(*line, 120), "' to ", what, ": ",
                not_an_object_why(*line));
  return j;
}

Result<std::optional<Answer>> ExternalSearcher::handle(Request& r) {
  using K = Request::Kind;
  switch (r.kind) {
    case K::kInit: {
      auto j = ask("init", r.msg);
      if (!j) return std::unexpected(j.error());
      if (j->value("ok", json()) != true)
        return fail("answered '", util::printable(compact(*j), 120),
                    "' to init (expected {\"ok\": true})");
      return std::nullopt;
    }
    case K::kNotify:
      return handle_notify(r);
    case K::kCompact:
      // A journal that cannot be compacted keeps growing; if it cannot be reopened either,
      // the next append says so.
      if (auto c = journal_.compact(r.compact_to); !c)
        spdlog::warn("external searcher: op journal not compacted: {}", c.error().message);
      return std::nullopt;
    case K::kSave: {
      fs::path dir = ctx_.experiment_dir / kSearcherStateDir / r.slot;
      std::error_code ec;
      fs::remove_all(dir, ec);
      fs::create_directories(dir, ec);
      if (ec) return fail("cannot make '", dir.string(), "': ", ec.message());
      auto j = ask("save", {{"op", "save"}, {"path", dir.string()}});
      if (!j) return std::unexpected(j.error());
      if (j->value("saved", json()) != dir.string())
        return fail("answered '", util::printable(compact(*j), 120),
                    "' to save (expected {\"saved\": \"", dir.string(), "\"})");
      Answer a;
      a.saved = true;
      {
        std::lock_guard lock(mu_);
        a.snapshot = descriptor(r.slot, known_);
      }
      return a;
    }
    default: {
      std::string what = "suggest (trial " + r.msg["trial_id"].get<std::string>() + ")";
      if (!r.replay) {
        if (auto a = journal_.append(r.msg); !a) return std::unexpected(a.error());
      }
      advance(r);
      auto j = ask(what, r.msg);
      if (!j) return std::unexpected(j.error());
      return handle_suggest(r, *j);
    }
  }
}

Result<std::optional<Answer>> ExternalSearcher::handle_notify(Request& r) {
  std::string id = r.msg["trial_id"].get<std::string>();
  bool complete = r.msg["op"] == "complete";
  bool told = false;  // already (a replay, or results read again after a resume)
  {
    std::lock_guard lock(mu_);
    told = known_.completed.count(id) > 0;
    const json& res = r.msg["result"];
    if (!told && !complete && res.is_object()) {
      const json& it = res.value("training_iteration", json());
      if (it.is_number_integer()) {
        auto [at, fresh] = known_.told_iteration.emplace(id, it.get<int64_t>());
        told = !fresh && at->second >= it.get<int64_t>();
        at->second = std::max(at->second, it.get<int64_t>());
      }
    }
  }
  if (told && !r.replay) return std::nullopt;  // not even journaled
  if (!r.replay) {
    if (auto j = journal_.append(r.msg); !j) return std::unexpected(j.error());
  }
  advance(r);
  if (told) return std::nullopt;
  if (auto s = child_.send(compact(r.msg), opts_.timeout_s); !s)
    return fail(s.error().message, " (sending ", r.msg.value("op", ""), ")");
  std::lock_guard lock(mu_);
  if (complete) known_.completed.insert(id);
  return std::nullopt;
}

Result<std::optional<Answer>> ExternalSearcher::handle_suggest(Request& r, const json& j) {
  std::string id = r.msg["trial_id"].get<std::string>();
  auto d = decode_suggest(space_, j, id);
  if (!d) return std::unexpected(d.error());
  Answer a;
  a.index = r.index;
  a.kind = d->kind;
  a.config = std::move(d->config);
  if (a.kind == Suggestion::Kind::kConfig) {
    std::lock_guard lock(mu_);
    known_.suggested.insert(id);
  }
  if (r.kind != Request::Kind::kReplay) return a;
  // A replayed suggestion only brings the child up to date; the trial keeps its config.
  if (a.kind == Suggestion::Kind::kConfig && !r.expected.is_null() && a.config.config != r.expected)
    spdlog::warn(
        "external searcher: trial {} replayed after the resume got another config ({}) "
        "than it has ({}); it keeps its own",
        id, util::printable(compact(a.config.config), 120),
        util::printable(compact(r.expected), 120));
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Searcher>> make_external_searcher(const ExternalOptions& o,
                                                         const Space& space, uint64_t,
                                                         uint64_t seed,
                                                         const SearcherContext& ctx) {
  if (auto p = resolve_command(o.command, ctx.cwd, "search_alg.command"); !p)
    return std::unexpected(p.error());
  return std::make_unique<ExternalSearcher>(o, space, seed, ctx);
}

}  // namespace tune::search
