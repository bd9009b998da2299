// What every executor shares: the default (local) file operations and the exit record parser.
#include "exec/executor.hpp"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "checkpoint/adopt.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"

#include <spdlog/spdlog.h>

namespace tune::exec {

namespace {
constexpr std::pair<ExitReason, const char*> kExitReasons[] = {
    {ExitReason::kExited, "exited"},
    {ExitReason::kDriverStop, "driver_stop"},
    {ExitReason::kOrphaned, "orphaned"},
    {ExitReason::kExecFailed, "exec_failed"},
    {ExitReason::kSupervisorDied, "supervisor_died"},
    {ExitReason::kHostLost, "host_lost"},
    {ExitReason::kPreempted, "preempted"},
    {ExitReason::kDirBusy, "dir_busy"},
    {ExitReason::kOutputLost, "output_lost"},
};
}  // namespace

const char* exit_reason_name(ExitReason r) {
  for (const auto& [v, name] : kExitReasons)
    if (v == r) return name;
  return "exited";
}

std::optional<ExitReason> parse_exit_reason(std::string_view s) {
  for (const auto& [v, name] : kExitReasons)
    if (s == name) return v;
  return std::nullopt;
}

std::optional<ExitInfo> parse_exit_record(std::string_view text, int attempt) {
  auto j = util::parse_json_ext(text);
  if (!j.is_object()) return std::nullopt;
  auto field = [&](const char* key) -> const nlohmann::json* {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const auto* a = field("attempt");
  if (!a || !a->is_number_integer() || a->get<int64_t>() != attempt) return std::nullopt;
  ExitInfo info;
  info.attempt = attempt;
  if (const auto* v = field("exit_code"); v && v->is_number_integer())
    info.exit_code = v->get<int>();
  if (const auto* v = field("signal"); v && v->is_number_integer()) info.signal = v->get<int>();
  if (const auto* v = field("pid"); v && v->is_number_integer()) info.pid = v->get<int>();
  if (const auto* v = field("supervisor"); v && v->is_number_integer())
    info.supervisor = v->get<int>();
  if (const auto* v = field("started"); v && v->is_number_unsigned())
    info.started = v->get<uint64_t>();
  if (const auto* v = field("nonce"); v && v->is_string()) info.nonce = v->get<std::string>();
  if (const auto* v = field("stdout_size"); v && v->is_number_unsigned())
    info.stdout_size = v->get<uint64_t>();
  if (const auto* v = field("stdout_from"); v && v->is_number_unsigned())
    info.stdout_from = v->get<uint64_t>();
  if (const auto* v = field("times_from"); v && v->is_number_unsigned())
    info.times_from = v->get<uint64_t>();
  if (const auto* v = field("stdout_cut"); v && v->is_number_unsigned())
    info.stdout_cut = v->get<uint64_t>();
  // The supervisor always writes a string reason and the time it ended.
  const auto* reason = field("reason");
  const auto* ended = field("ended");
  if (!reason || !reason->is_string() || !ended || !ended->is_number()) return std::nullopt;
  // A reason this driver does not know (a newer supervisor's): the exit code says the rest.
  info.reason = parse_exit_reason(reason->get<std::string>()).value_or(ExitReason::kExited);
  if (const auto* v = field("error"); v && v->is_string()) info.error = v->get<std::string>();
  return info;
}

void judge_cut(ExitInfo& info, uint64_t read_to) {
  if (!info.stdout_cut || read_to >= *info.stdout_cut || info.reason != ExitReason::kExited) return;
  info.reason = ExitReason::kOutputLost;
  info.error =
      "stdout.log was cut by another process after the trial's last output, before bytes " +
      std::to_string(read_to) + " to " + std::to_string(*info.stdout_cut) +
      " of it were read (part of the trial's output is lost)";
}

timespec lease_stamp() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  static const long long skew = [] {
    const char* v = std::getenv("TUNE_TEST_LEASE_SKEW_S");
    return v ? std::atoll(v) : 0LL;
  }();
  ts.tv_sec += static_cast<time_t>(skew);
  return ts;
}

Result<void> prepare_trial_dir(const Launch& l) {
  std::error_code ec;
  fs::create_directories(l.trial_dir, ec);
  if (ec) return fail("cannot create trial dir '", l.trial_dir.string(), "': ", ec.message());
  if (fs::is_symlink(fs::symlink_status(l.trial_dir, ec)))
    return fail("the trial dir '", l.trial_dir.string(),
                "' is a symbolic link: nothing is written through one");
  // Missing or changed (by an earlier attempt): every attempt starts with the trial's config.
  fs::path params = l.trial_dir / "params.json";
  auto same = [&] {
    if (!util::is_regular_file_at(params)) return false;  // (a FIFO there would block a read)
    auto now = util::read_file(params, l.params_json.size() + 1);
    return now && *now == l.params_json;
  };
  if (!l.params_json.empty() && !same()) {
    auto r = util::write_file_atomic(l.trial_dir / "params.json", l.params_json, false);
    if (!r) spdlog::warn("{}", r.error().message);
  }
  return {};
}

bool is_attempt_marker(std::string_view line) {
  if (!line.starts_with("=== attempt ") || !line.ends_with(" ===")) return false;
  std::string_view n = line.substr(12, line.size() - 16);
  return !n.empty() && n.find_first_not_of("0123456789") == std::string_view::npos;
}

// The default adoption: on this machine.
Result<void> Executor::adopt(const std::string&, const std::string& reported, const fs::path& cwd,
                             const fs::path& head_trial_dir, const std::string& dest) {
  return checkpoint::adopt(reported, cwd, head_trial_dir, dest);
}

Result<void> Executor::make_staging(const std::string&, const fs::path& head_trial_dir,
                                    const std::string& name) {
  (void)util::remove_tree_nofollow(head_trial_dir, name);
  std::error_code ec;
  fs::create_directory(head_trial_dir / name, ec);
  if (ec) return fail("cannot create ", (head_trial_dir / name).string(), ": ", ec.message());
  return {};
}

}  // namespace tune::exec
