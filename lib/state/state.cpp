#include "state/state.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "state/seal.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"

namespace tune::state {

using json = nlohmann::json;

namespace {

// A pbt exploit decided and not carried out yet (a trial's pending_exploit, in the state or a
// journal line): what carrying it out needs, with the right types.
bool exploit_well_formed(const json& pe) {
  return pe.is_object() && pe.contains("donor") && pe["donor"].is_string() &&
         pe.contains("donor_seq") && pe["donor_seq"].is_number_integer() && pe.contains("n") &&
         pe["n"].is_number_integer() && pe.contains("at") && pe["at"].is_number() &&
         pe.contains("new_config") && pe["new_config"].is_object();
}

json trial_to_json(const trial::Trial& t) {
  json metrics = metrics_to_json(t);
  json ckpts = json::array();
  for (const auto& c : t.checkpoints)
    ckpts.push_back({{"seq", c.seq},
                     {"dir", c.dir_name()},
                     {"iteration", c.iteration},
                     {"time_total_s", c.time_total_s},
                     {"metrics", c.metrics}});
  json out = {{"trial_id", t.id},
              {"trial_name", t.name},
              {"index", t.index},
              {"config", t.config},
              {"status", trial::status_name(t.status)},
              {"reason", trial::reason_name(t.reason)},
              {"cause", trial::cause_name(t.cause)},
              {"decided_at", t.decided_at},
              {"exploited_from", t.exploited_from},
              {"exploited_at", t.exploited_at},
              {"exploits", t.exploits},
              {"pending_exploit", t.pending_exploit},
              {"attempt", t.attempt},
              {"failures", t.failures},
              {"host", t.host},
              {"error", t.error},
              {"iteration", t.iteration},
              {"time_total_s", t.time_total_s},
              {"last_result", t.last_result},
              {"metrics", metrics},
              {"checkpoints", ckpts},
              {"checkpoint_seq", t.checkpoint_seq},
              {"stdout_offset", t.stdout_offset},
              {"attempt_started", t.attempt_started},
              {"restore_iteration", t.restore_iteration},
              {"time_base", t.time_base},
              {"gpu_ids", t.gpu_ids},
              {"job_id", t.job_id}};
  if (!t.adopting.empty()) {  // (only while a checkpoint is being taken)
    json adopting = json::array();
    for (const auto& a : t.adopting)
      adopting.push_back({{"seq", a.checkpoint.seq},
                          {"iteration", a.checkpoint.iteration},
                          {"time_total_s", a.checkpoint.time_total_s},
                          {"metrics", a.checkpoint.metrics},
                          {"reported", a.reported}});
    out["adopting"] = std::move(adopting);
  }
  return out;
}

// Whether `j` converts to T without nlohmann's plain cast of a float (or an out-of-range
// integer) to an integer type, undefined behaviour for 1e300: for integer types (and vectors of
// them) only integers that fit pass; anything else is left to get<T>() and its type checks.
template <typename T>
struct is_vector : std::false_type {};
template <typename U, typename A>
struct is_vector<std::vector<U, A>> : std::true_type {};

template <typename T>
bool fits_integers(const json& j) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (j.is_number_unsigned())
      return j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    if (j.is_number_integer()) {
      int64_t v = j.get<int64_t>();
      return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
             (v < 0 ||
              static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
    }
    return false;
  } else if constexpr (is_vector<T>::value) {
    if (!j.is_array()) return true;  // get<T>() refuses it
    return std::all_of(j.begin(), j.end(),
                       [](const json& e) { return fits_integers<typename T::value_type>(e); });
  } else {
    return true;
  }
}

struct Reader {
  const std::string& where;
  Error err;
  bool ok = true;

  template <typename T>
  T get(const json& j, const char* key, const std::string& ctx) {
    auto it = j.find(key);
    if (it == j.end()) {
      if (ok) err = {where + ": " + ctx + ": missing '" + key + "'"}, ok = false;
      return T{};
    }
    if (!fits_integers<T>(*it)) {
      if (ok) err = {where + ": " + ctx + ": '" + key + "' is not an integer in range"}, ok = false;
      return T{};
    }
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      if (ok) err = {where + ": " + ctx + ": '" + key + "' has the wrong type"}, ok = false;
      return T{};
    }
  }
};

// One of a metric's last/min/max: NaN if it is not a number (a state written before NaN was
// kept wrote it as null).
double stat(const json& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && it->is_number() ? it->get<double>()
                                          : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

json metrics_to_json(const trial::Trial& t) {
  json metrics = json::object();
  for (const auto& [k, m] : t.metrics)
    metrics[k] = {{"last", m.last}, {"min", m.min}, {"max", m.max}};
  return metrics;
}

namespace {
// What follows the header's members on the state file's first line.
constexpr std::string_view kTrialsOpen = ",\"trials\":[";

// Everything but the trials.
json header_json(const ExperimentState& s) {
  return {{"version", kStateVersion},
          {"name", s.name},
          {"searcher",
           {{"seed", s.seed}, {"total_trials", s.total_trials}, {"next_index", s.next_index}}},
          {"start_time", s.start_time},
          {"elapsed_s", s.elapsed_s},
          {"phase", s.phase},
          {"metric", s.metric ? json(*s.metric) : json(nullptr)},
          {"mode", s.mode},
          {"hosts", s.hosts},
          {"scheduler", s.scheduler},
          {"pbt_policy_bytes", s.pbt_policy_bytes},
          {"scheduler_log_bytes", s.scheduler_log_bytes},
          {"search_alg", s.search_alg}};
}
}  // namespace

json to_json(const ExperimentState& s) {
  json trials = json::array();
  for (const auto& t : s.trials) trials.push_back(trial_to_json(t));
  json j = header_json(s);
  j["trials"] = std::move(trials);
  return j;
}

namespace {

// A trial's checkpoints being taken (after its checkpoints and checkpoint_seq are read): each
// one numbered, not registered, above the one before and at most checkpoint_seq.
Result<void> read_adopting(Reader& r, const json& list, const std::string& ctx, trial::Trial& t) {
  if (!list.is_array()) return fail(r.where, ": ", ctx, ": not a list");
  for (const auto& aj : list) {
    trial::Adopting a;
    a.checkpoint.seq = r.get<int64_t>(aj, "seq", ctx);
    a.checkpoint.iteration = r.get<int64_t>(aj, "iteration", ctx);
    a.checkpoint.time_total_s = r.get<double>(aj, "time_total_s", ctx);
    a.checkpoint.metrics = r.get<json>(aj, "metrics", ctx);
    a.reported = r.get<std::string>(aj, "reported", ctx);
    if (!r.ok) return std::unexpected(r.err);
    int64_t seq = a.checkpoint.seq;
    if (seq < 1 || seq > t.checkpoint_seq ||
        (!t.adopting.empty() && seq <= t.adopting.back().checkpoint.seq) ||
        std::any_of(t.checkpoints.begin(), t.checkpoints.end(),
                    [&](const trial::Checkpoint& c) { return c.seq == seq; }))
      return fail(r.where, ": ", ctx,
                  ": bad checkpoint seq (above checkpoint_seq, not rising, or registered)");
    if (!a.checkpoint.metrics.is_object())
      return fail(r.where, ": ", ctx, ": 'metrics' is not an object");
    if (a.reported.empty() || a.reported.size() > 4096 ||
        a.reported.find('\0') != std::string::npos)
      return fail(r.where, ": ", ctx, ": bad reported path");
    t.adopting.push_back(std::move(a));
  }
  return {};
}

}  // namespace

Result<ExperimentState> from_json(const json& j, const std::string& where,
                                  const std::function<void(size_t, size_t)>& progress) {
  if (!j.is_object()) return fail(where, ": not a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer())
    return fail(where, ": no version field; not a tune experiment state");
  int v = j["version"].get<int>();
  if (v != kStateVersion)
    return fail(where, ": state version ", std::to_string(v),
                " is not supported by this tune (expects ", std::to_string(kStateVersion), ")");
  Reader r{where, {}};
  ExperimentState s;
  s.name = r.get<std::string>(j, "name", "experiment");
  json searcher = r.get<json>(j, "searcher", "experiment");
  if (r.ok && !searcher.is_object()) return fail(where, ": 'searcher' is not an object");
  if (r.ok) {
    s.seed = r.get<uint64_t>(searcher, "seed", "searcher");
    s.total_trials = r.get<uint64_t>(searcher, "total_trials", "searcher");
    s.next_index = r.get<uint64_t>(searcher, "next_index", "searcher");
  }
  s.start_time = r.get<double>(j, "start_time", "experiment");
  s.elapsed_s = r.get<double>(j, "elapsed_s", "experiment");
  s.phase = r.get<std::string>(j, "phase", "experiment");
  if (j.contains("metric") && j["metric"].is_string()) s.metric = j["metric"].get<std::string>();
  if (j.contains("mode") && j["mode"].is_string()) s.mode = j["mode"].get<std::string>();
  if (j.contains("hosts") && j["hosts"].is_object())
    for (auto it = j["hosts"].begin(); it != j["hosts"].end(); ++it)
      if (it->is_string()) s.hosts[it.key()] = it->get<std::string>();
  if (j.contains("scheduler")) s.scheduler = j["scheduler"];     // checked by the scheduler
  if (j.contains("search_alg")) s.search_alg = j["search_alg"];  // checked by the searcher
  if (j.contains("pbt_policy_bytes"))  // (absent in states written before pbt existed)
    s.pbt_policy_bytes = r.get<uint64_t>(j, "pbt_policy_bytes", "experiment");
  if (j.contains("scheduler_log_bytes"))  // (absent in states written before the log existed)
    s.scheduler_log_bytes = r.get<uint64_t>(j, "scheduler_log_bytes", "experiment");
  json trials = r.get<json>(j, "trials", "experiment");
  if (!r.ok) return std::unexpected(r.err);
  if (!trials.is_array()) return fail(where, ": 'trials' is not a list");
  for (size_t i = 0; i < trials.size(); ++i) {
    if (progress && i % 256 == 0) progress(i, trials.size());
    const json& tj = trials[i];
    std::string ctx = "trials[" + std::to_string(i) + "]";
    if (!tj.is_object()) return fail(where, ": ", ctx, " is not an object");
    trial::Trial t;
    t.id = r.get<std::string>(tj, "trial_id", ctx);
    t.name = r.get<std::string>(tj, "trial_name", ctx);
    t.index = r.get<uint64_t>(tj, "index", ctx);
    t.config = r.get<json>(tj, "config", ctx);
    auto st = trial::parse_status(r.get<std::string>(tj, "status", ctx));
    t.attempt = r.get<int>(tj, "attempt", ctx);
    t.failures = r.get<int>(tj, "failures", ctx);
    t.host = r.get<std::string>(tj, "host", ctx);
    t.error = r.get<std::string>(tj, "error", ctx);
    t.iteration = r.get<int64_t>(tj, "iteration", ctx);
    t.time_total_s = r.get<double>(tj, "time_total_s", ctx);
    t.last_result = r.get<json>(tj, "last_result", ctx);
    t.checkpoint_seq = r.get<int64_t>(tj, "checkpoint_seq", ctx);
    t.stdout_offset = r.get<uint64_t>(tj, "stdout_offset", ctx);
    if (tj.contains("attempt_started"))  // (absent in states written before re-attach existed)
      t.attempt_started = r.get<double>(tj, "attempt_started", ctx);
    if (tj.contains("restore_iteration"))
      t.restore_iteration = r.get<int64_t>(tj, "restore_iteration", ctx);
    if (tj.contains("time_base")) t.time_base = r.get<double>(tj, "time_base", ctx);
    if (tj.contains("reason")) {  // (absent in states written before reasons existed)
      auto why = trial::parse_reason(r.get<std::string>(tj, "reason", ctx));
      if (r.ok && !why) return fail(where, ": ", ctx, ": unknown reason");
      t.reason = why.value_or(trial::Reason::kNone);
    }
    if (tj.contains("cause")) {  // (absent in states written before schedulers existed)
      auto cause = trial::parse_cause(r.get<std::string>(tj, "cause", ctx));
      if (r.ok && !cause) return fail(where, ": ", ctx, ": unknown cause");
      t.cause = cause.value_or(trial::Cause::kNone);
      t.decided_at = r.get<double>(tj, "decided_at", ctx);
    }
    if (tj.contains("exploits")) {  // (absent in states written before pbt existed)
      t.exploited_from = r.get<std::string>(tj, "exploited_from", ctx);
      t.exploited_at = r.get<double>(tj, "exploited_at", ctx);
      t.exploits = r.get<int>(tj, "exploits", ctx);
      t.pending_exploit = r.get<json>(tj, "pending_exploit", ctx);
      if (r.ok && !t.pending_exploit.is_null() && !exploit_well_formed(t.pending_exploit))
        return fail(where, ": ", ctx,
                    ": 'pending_exploit' needs donor, donor_seq, n, at and new_config");
    }
    if (tj.contains("gpu_ids")) t.gpu_ids = r.get<std::vector<int>>(tj, "gpu_ids", ctx);
    if (tj.contains("job_id")) {
      t.job_id = r.get<std::string>(tj, "job_id", ctx);
      // JOBID, or JOBID.STEPID for a job step (use_allocation)
      const std::string& j = t.job_id;
      size_t dot = j.find('.');
      bool steplike = dot != std::string::npos && dot > 0 && dot + 1 < j.size() &&
                      j.find('.', dot + 1) == std::string::npos;
      if (r.ok && (j.size() > 24 || j.find_first_not_of("0123456789.") != std::string::npos ||
                   (dot != std::string::npos && !steplike)))
        return fail(where, ": ", ctx, ": 'job_id' is not a Slurm job id or job step id");
    }
    json metrics = r.get<json>(tj, "metrics", ctx);
    json ckpts = r.get<json>(tj, "checkpoints", ctx);
    if (!r.ok) return std::unexpected(r.err);
    if (!st) return fail(where, ": ", ctx, ": unknown status");
    t.status = *st;
    // The name becomes a directory: it must be one plain component.
    if (t.name.empty() || t.name != util::safe_component(t.name) || t.name[0] == '.')
      return fail(where, ": ", ctx, ": unsafe trial name '", t.name, "'");
    if (metrics.is_object()) {
      for (auto it = metrics.begin(); it != metrics.end(); ++it) {
        if (!it->is_object()) continue;
        t.metrics[it.key()] = {stat(*it, "last"), stat(*it, "min"), stat(*it, "max")};
      }
    }
    if (!ckpts.is_array()) return fail(where, ": ", ctx, ": 'checkpoints' is not a list");
    for (const auto& cj : ckpts) {
      trial::Checkpoint c;
      c.seq = r.get<int64_t>(cj, "seq", ctx + ".checkpoints");
      c.iteration = r.get<int64_t>(cj, "iteration", ctx + ".checkpoints");
      c.time_total_s = r.get<double>(cj, "time_total_s", ctx + ".checkpoints");
      c.metrics = r.get<json>(cj, "metrics", ctx + ".checkpoints");
      if (!r.ok) return std::unexpected(r.err);
      if (c.seq < 1 || c.seq > 999'999'999 ||
          (!t.checkpoints.empty() && c.seq <= t.checkpoints.back().seq))
        return fail(where, ": ", ctx, ": bad checkpoint seq (out of range or not rising)");
      t.checkpoints.push_back(std::move(c));
    }
    if (tj.contains("adopting"))  // (absent unless a checkpoint was being taken)
      if (auto a = read_adopting(r, tj["adopting"], ctx + ".adopting", t); !a)
        return std::unexpected(a.error());
    s.trials.push_back(std::move(t));
  }
  if (progress) progress(trials.size(), trials.size());
  return s;
}

Result<void> StateWriter::save(const fs::path& exp_dir, const ExperimentState& s, bool durable) {
  // The header (with the counts by status, so `tune ls` reads one line), then the trials, one
  // per line, each line sealed.
  json head = header_json(s);
  std::map<trial::Status, uint64_t> by_status;
  for (const auto& t : s.trials) ++by_status[t.status];
  json counts = json::object();
  for (const auto& [st, n] : by_status) counts[trial::status_name(st)] = n;
  head["counts"] = std::move(counts);
  std::string out = seal_header(util::dump_json_ext(head), kTrialsOpen);
  out += '\n';

  util::AtomicFile file(exp_dir / kStateFile);
  if (auto r = file.open(); !r) return r;
  cache_.resize(s.trials.size());
  last_serialized_ = 0;
  constexpr size_t kChunk = 1u << 20;
  for (size_t i = 0; i < s.trials.size(); ++i) {
    const auto& t = s.trials[i];
    Key key{static_cast<int>(t.status),
            static_cast<int>(t.reason),
            t.attempt,
            t.failures,
            t.iteration,
            t.checkpoint_seq,
            t.checkpoints.size(),
            t.stdout_offset,
            t.time_total_s,
            t.attempt_started,
            t.host,
            t.error,
            static_cast<int>(t.cause),
            t.decided_at,
            t.exploits,
            !t.pending_exploit.is_null(),
            t.job_id,
            t.adopting.size(),
            t.adopting.empty() ? 0 : t.adopting.back().checkpoint.seq};
    Entry& e = cache_[i];
    if (e.text.empty() || !(e.key == key)) {
      e.key = std::move(key);
      e.text = seal_object(util::dump_json_ext(trial_to_json(t)));  // NaN stays NaN (not null)
      ++last_serialized_;
    }
    out += e.text;
    out += i + 1 < s.trials.size() ? ",\n" : "\n";
    if (out.size() >= kChunk) {
      if (auto r = file.write(out); !r) return r;
      out.clear();
    }
  }
  out += "]}\n";
  if (auto r = file.write(out); !r) return r;
  return file.commit(durable);
}

Result<void> save(const fs::path& exp_dir, const ExperimentState& s, bool durable) {
  StateWriter w;
  return w.save(exp_dir, s, durable);
}

namespace {
fs::path journal_path(const fs::path& exp_dir) {
  return exp_dir / ".tune" / "state.journal";
}

// A decision line: kept (the latest per trial) if it is about the current attempt of a trial
// the state has RUNNING; malformed lines are ignored.
void replay_decision(ExperimentState& s, const json& d) {
  if (!d.contains("trial_id") || !d["trial_id"].is_string() || !d.contains("attempt") ||
      !d["attempt"].is_number_integer() || !d.contains("iteration") ||
      !d["iteration"].is_number_integer() || !d.contains("reason") || !d["reason"].is_string() ||
      !d.contains("cause") || !d["cause"].is_string())
    return;
  JournalledDecision out;
  out.trial_id = d["trial_id"].get<std::string>();
  out.attempt = d["attempt"].get<int>();
  out.iteration = d["iteration"].get<int64_t>();
  auto reason = trial::parse_reason(d["reason"].get<std::string>());
  auto cause = trial::parse_cause(d["cause"].get<std::string>());
  if (!reason || !cause ||
      (*reason != trial::Reason::kStopped && *reason != trial::Reason::kPaused))
    return;
  out.reason = *reason;
  out.cause = *cause;
  if (d.contains("decided_at") && d["decided_at"].is_number())
    out.decided_at = d["decided_at"].get<double>();
  if (d.contains("exploit")) {
    // An exploit's record must be whole: a pause that lost it would replay as a plain pause.
    if (!exploit_well_formed(d["exploit"]) || *reason != trial::Reason::kPaused) return;
    out.exploit = d["exploit"];
  }
  bool current = false;
  for (const auto& t : s.trials)
    if (t.id == out.trial_id)
      current = t.status == trial::Status::kRunning && t.attempt == out.attempt;
  if (!current) return;
  std::erase_if(s.decisions, [&](const auto& x) { return x.trial_id == out.trial_id; });
  s.decisions.push_back(std::move(out));
}

// Applies one journal line; unknown or malformed lines are ignored.
void replay(ExperimentState& s, const json& j) {
  if (j.is_object() && j.contains("decision") && j["decision"].is_object())
    return replay_decision(s, j["decision"]);
  if (!j.is_object() || !j.contains("launch") || !j["launch"].is_object()) return;
  const json& l = j["launch"];
  if (!l.contains("trial_id") || !l["trial_id"].is_string() || !l.contains("attempt") ||
      !l["attempt"].is_number_integer() || !l.contains("index") ||
      !l["index"].is_number_unsigned() || !l.contains("trial_name") || !l["trial_name"].is_string())
    return;
  std::string id = l["trial_id"].get<std::string>();
  std::string name = l["trial_name"].get<std::string>();
  if (name.empty() || name != util::safe_component(name) || name[0] == '.') return;
  int attempt = l["attempt"].get<int>();
  trial::Trial* t = nullptr;
  for (auto& x : s.trials)
    if (x.id == id) t = &x;
  if (!t) {
    trial::Trial fresh;
    fresh.id = id;
    fresh.name = name;
    fresh.index = l["index"].get<uint64_t>();
    fresh.config = l.value("config", json::object());
    s.trials.push_back(std::move(fresh));
    t = &s.trials.back();
    s.next_index = std::max(s.next_index, t->index + 1);
  }
  if (attempt > t->attempt) {
    t->attempt = attempt;
    t->status = trial::Status::kRunning;
    t->reason = trial::Reason::kNone;
    if (l.contains("stdout_offset") && l["stdout_offset"].is_number_unsigned())
      t->stdout_offset = l["stdout_offset"].get<uint64_t>();
    if (l.contains("started") && l["started"].is_number()) t->attempt_started = l["started"];
    if (l.contains("host") && l["host"].is_string()) t->host = l["host"].get<std::string>();
    t->gpu_ids.clear();
    t->job_id.clear();  // a new attempt: its job is not known yet
    if (l.contains("gpu_ids") && l["gpu_ids"].is_array())
      for (const auto& g : l["gpu_ids"])
        if (g.is_number_integer()) t->gpu_ids.push_back(g.get<int>());
    // Only first attempts are journalled (a restart writes the whole state first), so the
    // attempt starts from scratch.
    t->iteration = t->restore_iteration = 0;
    t->time_total_s = t->time_base = 0;
  }
}
}  // namespace

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> Journal::open(const fs::path& exp_dir) {
  path_ = journal_path(exp_dir);
  std::error_code ec;
  fs::create_directories(path_.parent_path(), ec);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return fail("cannot open '", path_.string(), "': ", std::strerror(errno));
  return {};
}

Result<void> Journal::record_launch(const trial::Trial& t) {
  if (fd_ < 0) return fail("internal: journal not open");
  json line = {{"launch",
                {{"trial_id", t.id},
                 {"trial_name", t.name},
                 {"index", t.index},
                 {"config", t.config},
                 {"attempt", t.attempt},
                 {"stdout_offset", t.stdout_offset},
                 {"started", t.attempt_started},
                 {"gpu_ids", t.gpu_ids},
                 {"host", t.host}}}};
  return append(line);
}

Result<void> Journal::record_decision(const JournalledDecision& d) {
  json line = {{"trial_id", d.trial_id},
               {"attempt", d.attempt},
               {"reason", trial::reason_name(d.reason)},
               {"cause", trial::cause_name(d.cause)},
               {"decided_at", d.decided_at},
               {"iteration", d.iteration}};
  if (d.exploit.is_object()) line["exploit"] = d.exploit;
  return append({{"decision", std::move(line)}});
}

Result<void> Journal::append(const json& line) {
  if (fd_ < 0) return fail("internal: journal not open");
  std::string text = seal_object(util::dump_json_ext(line)) + "\n";
  ssize_t n =
      ::write(fd_, text.data(), text.size());  // one write: a line is whole or torn, never mixed
  if (n != static_cast<ssize_t>(text.size())) {
    if (n > 0 &&
        ::ftruncate(fd_, ::lseek(fd_, 0, SEEK_END) - n) != 0) { /* a torn line is dropped on load */
    }
    return fail("cannot append to '", path_.string(),
                "': ", n < 0 ? std::strerror(errno) : "short write");
  }
  return {};
}

Result<void> Journal::reset() {
  if (fd_ >= 0 && ::ftruncate(fd_, 0) != 0)
    return fail("cannot truncate '", path_.string(), "': ", std::strerror(errno));
  return {};
}

namespace {

// "FILE: line L (byte B): what": damage the reader found, where it is.
std::unexpected<Error> damaged(const fs::path& p, size_t line, size_t byte, std::string_view what) {
  return fail(p.string(), ": line ", std::to_string(line), " (byte ", std::to_string(byte),
              "): ", what);
}

// Calls f(line_number, byte_offset, line, has_newline) for each line of `text`; stops at the
// first error f returns.
template <typename F>
Result<void> for_each_line(std::string_view text, F&& f) {
  size_t start = 0, number = 1;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    bool whole = nl != std::string_view::npos;
    auto r =
        f(number, start, text.substr(start, whole ? nl - start : std::string_view::npos), whole);
    if (!r || !whole) return r;
    start = nl + 1;
    ++number;
  }
  return {};
}

// Checks the seals of the state file's lines. A file is sealed throughout or not at all: a
// file without seals is read unchecked (written by an older tune, or by a JSON tool), but in a
// sealed file a line without its seal is damage too (a flipped byte can unmake a seal).
Result<void> check_state_seals(std::string_view text, const fs::path& p) {
  std::optional<bool> sealed;  // as the first object line says
  return for_each_line(text, [&](size_t n, size_t at, std::string_view line, bool) -> Result<void> {
    if (n > 1 && !line.empty() && line.back() == ',') line.remove_suffix(1);
    if (n > 1 && (line.empty() || line.front() != '{')) return {};  // "]}" and the like
    SealCheck c = n == 1 ? check_header(line, kTrialsOpen) : check_object(line);
    if (c == SealCheck::kBroken) return damaged(p, n, at, "checksum mismatch (corrupt or torn)");
    if (!sealed) sealed = c == SealCheck::kValid;
    if (*sealed != (c == SealCheck::kValid))
      return damaged(p, n, at, "a line without the checksum its file's lines carry (corrupt)");
    return {};
  });
}

// Replays the journal over `s`. A whole line that does not parse, or whose seal is broken, is
// damage (refused: a launch would be lost); a torn last line is a launch whose write did not
// complete, which therefore never started: dropped with a warning, unless it is whole but for
// its newline.
Result<void> replay_journal(ExperimentState& s, std::string_view text, const fs::path& p) {
  auto each = [&](size_t n, size_t at, std::string_view line, bool whole) -> Result<void> {
    auto j = util::parse_json_ext(line);
    bool bad = check_object(line) == SealCheck::kBroken || j.is_discarded();
    if (!whole && bad) {
      spdlog::warn("{}: dropped a torn last line at byte {}", p.string(), at);
      return {};
    }
    if (bad) return damaged(p, n, at, "corrupt journal line");
    replay(s, j);
    return {};
  };
  return for_each_line(text, each);
}

}  // namespace

const char* load_stage_label(LoadStage s) {
  return s == LoadStage::kParse ? "reading state" : "checking trials";
}

Result<ExperimentState> load(const fs::path& exp_dir, const LoadProgress& progress) {
  fs::path p = exp_dir / kStateFile;
  auto text = util::read_file(p, 1ull << 32);
  if (!text) return std::unexpected(text.error());
  if (text->empty()) return fail(p.string(), ": empty file (byte 0)");
  if (auto r = check_state_seals(*text, p); !r) return std::unexpected(r.error());
  json j = progress ? util::parse_json_ext(*text, util::kMaxJsonDepth,
                                           [&](size_t done, size_t total) {
                                             progress(LoadStage::kParse, done, total);
                                           })
                    : util::parse_json_ext(*text);
  if (j.is_discarded()) {
    // Where: nlohmann's parser names the byte (NaN tokens aside, which parse_json_ext took).
    size_t at = 0;
    try {
      json probe = json::parse(*text);  // throws, naming the byte
      (void)probe;
    } catch (const json::parse_error& e) {
      at = e.byte;
    } catch (const json::exception&) {
    }
    return fail(p.string(), ": not valid JSON at byte ", std::to_string(at), " (torn or corrupt)");
  }
  auto s = from_json(j, p.string(), [&](size_t done, size_t total) {
    if (progress) progress(LoadStage::kCheck, done, total);
  });
  if (!s) return s;
  fs::path jp = journal_path(exp_dir);
  std::error_code ec;
  if (!fs::exists(jp, ec)) return s;  // (an experiment that never launched a trial)
  auto journal = util::read_file(jp, 1ull << 32);
  if (!journal) return std::unexpected(journal.error());
  if (auto r = replay_journal(*s, *journal, jp); !r) return std::unexpected(r.error());
  return s;
}

namespace {

// Lines of a file, read in chunks; a line longer than `max_line` is an error, not a buffer.
class LineReader {
 public:
  LineReader(const fs::path& p, size_t max_line) : max_line_(max_line) {
    // O_NONBLOCK: a FIFO planted in the experiment dir would block open() forever.
    fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st {};
    if (fd_ < 0)
      err_ = std::strerror(errno);
    else if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      err_ = "not a regular file";
  }
  ~LineReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  [[nodiscard]] bool ok() const { return err_.empty(); }
  [[nodiscard]] const std::string& error() const { return err_; }
  // The next line without its newline; false at the end (a last line without a newline is
  // returned) or on error (see error()).
  bool next(std::string& line) {
    line.clear();
    while (ok()) {
      size_t nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) {
        line.assign(buf_, pos_, nl - pos_);
        pos_ = nl + 1;
        return true;
      }
      if (buf_.size() - pos_ > max_line_) {
        err_ = "a line longer than " + std::to_string(max_line_ >> 20) + " MiB";
        return false;
      }
      buf_.erase(0, pos_);
      pos_ = 0;
      size_t old = buf_.size();
      buf_.resize(old + kChunk);
      ssize_t n = ::read(fd_, buf_.data() + old, kChunk);
      buf_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
      if (n < 0) err_ = std::strerror(errno);
      if (n == 0) {
        if (buf_.empty()) return false;
        line = std::move(buf_);
        buf_.clear();
        return true;
      }
    }
    return false;
  }

 private:
  static constexpr size_t kChunk = 1u << 20;
  int fd_ = -1;
  size_t max_line_;
  std::string buf_, err_;
  size_t pos_ = 0;
};

// The header line `{...,"trials":[` as a JSON object (without "trials"), or discarded.
json parse_header_line(const std::string& line) {
  if (!line.ends_with(kTrialsOpen)) return json(json::value_t::discarded);
  std::string_view head(line.data(), line.size() - kTrialsOpen.size());
  return util::parse_json_ext(std::string(head) + "}");
}

}  // namespace

Result<Summary> read_summary(const fs::path& exp_dir) {
  fs::path p = exp_dir / kStateFile;
  LineReader in(p, 1u << 20);
  std::string line;
  if (!in.next(line)) return fail(p.string(), ": ", in.ok() ? "empty file" : in.error());
  json h = parse_header_line(line);
  if (h.is_discarded() || !h.is_object() || !h.contains("counts") || !h["counts"].is_object())
    return fail(p.string(), ": no summary header (written by an older tune)");
  h["trials"] = json::array();
  auto s = from_json(h, p.string() + ":1");
  if (!s) return std::unexpected(s.error());
  Summary out{s->name, s->phase, s->total_trials, s->next_index, s->elapsed_s, {}};
  for (auto it = h["counts"].begin(); it != h["counts"].end(); ++it) {
    auto st = trial::parse_status(it.key());
    if (!st || !it->is_number_unsigned())
      return fail(p.string(), ":1: bad count for '", it.key(), "'");
    out.counts[*st] = it->get<uint64_t>();
  }
  return out;
}

Result<void> stream(const fs::path& exp_dir,
                    const std::function<void(const ExperimentState&)>& on_header,
                    const std::function<void(trial::Trial&&)>& on_trial) {
  fs::path p = exp_dir / kStateFile;
  // The journal is small (launches since the last full write): read it first, by trial.
  std::map<std::string, std::vector<json>> launches;
  if (auto journal = util::read_file(journal_path(exp_dir), 1ull << 32)) {
    for (size_t start = 0, nl; (nl = journal->find('\n', start)) != std::string::npos;
         start = nl + 1) {
      json j = util::parse_json_ext(std::string_view(*journal).substr(start, nl - start));
      if (j.is_object() && j.contains("launch") && j["launch"].is_object() &&
          j["launch"].contains("trial_id") && j["launch"]["trial_id"].is_string())
        launches[j["launch"]["trial_id"].get<std::string>()].push_back(std::move(j));
    }
  }
  LineReader in(p, 1ull << 30);
  std::string line;
  if (!in.next(line)) return fail(p.string(), ": ", in.ok() ? "empty file (byte 0)" : in.error());
  // The seals are checked as state::load checks them: a sealed file is sealed throughout.
  SealCheck head_seal = check_header(line, kTrialsOpen);
  json header = parse_header_line(line);
  if (head_seal == SealCheck::kBroken || header.is_discarded() || !header.is_object())
    return fail(p.string(),
                ": line 1 (byte 0): not a tune experiment state header (torn or corrupt)");
  header["trials"] = json::array();
  auto head = from_json(header, p.string() + ": line 1 (byte 0)");
  if (!head) return std::unexpected(head.error());
  on_header(*head);
  bool closed = false;
  uint64_t at = line.size() + 1;  // byte offset of the line being read
  for (size_t lineno = 2; in.next(line); ++lineno, at += line.size() + 1) {
    if (line == "]}") {
      closed = true;
      break;
    }
    std::string where =
        p.string() + ": line " + std::to_string(lineno) + " (byte " + std::to_string(at) + ")";
    std::string_view obj(line);
    if (obj.ends_with(',')) obj.remove_suffix(1);
    SealCheck seal = check_object(obj);
    if (seal == SealCheck::kBroken ||
        (seal == SealCheck::kValid) != (head_seal == SealCheck::kValid))
      return fail(where, ": checksum mismatch (corrupt or torn)");
    header["trials"] = json::array({util::parse_json_ext(obj)});
    if (header["trials"][0].is_discarded())
      return fail(where, ": not valid JSON (torn or corrupt)");
    auto one = from_json(header, where);
    if (!one) return std::unexpected(one.error());
    trial::Trial& t = one->trials.front();
    if (auto it = launches.find(t.id); it != launches.end()) {
      for (const auto& j : it->second) replay(*one, j);
      launches.erase(it);
    }
    on_trial(std::move(one->trials.front()));
  }
  if (!in.ok()) return fail(p.string(), ": ", in.error());
  if (!closed) return fail(p.string(), ": ends before its last trial (torn or corrupt)");
  // Trials only the journal knows (launched since the last full write), by index.
  ExperimentState rest = *head;
  for (const auto& [id, lines] : launches)
    for (const auto& j : lines) replay(rest, j);
  std::sort(rest.trials.begin(), rest.trials.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  for (auto& t : rest.trials) on_trial(std::move(t));
  return {};
}

}  // namespace tune::state
