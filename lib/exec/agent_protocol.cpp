#include "exec/agent_protocol.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "util/base64.hpp"
#include "util/strings.hpp"

namespace tune::exec {

using nlohmann::json;

namespace {

// An output event's sizes and bytes; none (from -1) unless all of them are well formed.
void output_bytes(const json& j, AgentEvent& e) {
  auto num = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? std::max<int64_t>(-1, it->get<int64_t>())
                                                    : -1;
  };
  auto bytes = [&](const char* key) -> std::optional<std::string> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return util::base64_decode(it->get_ref<const std::string&>());
  };
  e.size = num("size");
  int64_t from = num("from"), times_from = num("times_from");
  if (from < 0 || times_from < 0) return;
  auto data = bytes("data");
  auto times = bytes("times");
  if (!data || !times) return;
  e.from = from;
  e.data = std::move(*data);
  e.times_from = times_from;
  e.times = std::move(*times);
}

}  // namespace

std::optional<AgentEvent> parse_agent_event(std::string_view line) {
  auto j = json::parse(line, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto kind = j.find("event");
  if (kind == j.end() || !kind->is_string()) return std::nullopt;
  using Kind = AgentEvent::Kind;
  static constexpr std::pair<std::string_view, Kind> kKinds[] = {
      {"ready", Kind::kReady},         {"launched", Kind::kLaunched}, {"gone", Kind::kGone},
      {"error", Kind::kError},         {"output", Kind::kOutput},     {"watching", Kind::kWatching},
      {"unwatched", Kind::kUnwatched}, {"start", Kind::kStart},       {"exit", Kind::kExit},
      {"changes", Kind::kChanges},     {"alive", Kind::kAlive},       {"done", Kind::kDone},
      {"written", Kind::kWritten}};
  AgentEvent e;
  const std::string& k = kind->get_ref<const std::string&>();
  auto known = std::find_if(std::begin(kKinds), std::end(kKinds),
                            [&](const auto& p) { return p.first == k; });
  if (known == std::end(kKinds)) return std::nullopt;
  e.kind = known->second;
  auto str = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* key, int64_t dflt) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : dflt;
  };
  e.id = str("id");
  if (auto t = j.find("transient"); t != j.end() && t->is_boolean()) e.transient = t->get<bool>();
  if (auto t = j.find("watched"); t != j.end() && t->is_boolean()) e.watched = t->get<bool>();
  e.error = e.kind == AgentEvent::Kind::kError ? str("message") : str("error");
  e.op = str("op");
  int64_t attempt = num("attempt", 0), sup = num("supervisor", -1), status = num("status", 0);
  int64_t offset = num("offset", 0), pid = num("pid", -1);
  if (attempt < 0 || attempt > INT32_MAX || sup > INT32_MAX || sup < -1 || offset < 0 ||
      status < -1 || status > 255 + 128 || pid > INT32_MAX || pid < -1)
    return std::nullopt;
  auto ticks = [&](const char* key) -> uint64_t {
    auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  e.started = ticks("started");
  e.supervisor_started = ticks("supervisor_started");
  e.pid = pid > 0 ? static_cast<int>(pid) : -1;
  if (e.kind == Kind::kExit) e.line = line;
  if (e.kind == Kind::kChanges) {
    auto answer = j.find("answer");
    if (answer == j.end() || !answer->is_string()) return std::nullopt;
    e.data = answer->get<std::string>();
  }
  if (e.kind == Kind::kLaunched) {
    int64_t times_offset = num("times_offset", 0);
    if (times_offset < 0) return std::nullopt;
    e.times_offset = static_cast<uint64_t>(times_offset);
  }
  if (e.kind == Kind::kOutput) output_bytes(j, e);
  if (e.kind == Kind::kDone && (e.req = num("req", -1)) < 0) return std::nullopt;
  e.n = ticks("n");
  e.already = ticks("already");
  e.stdin_lost = e.kind == Kind::kError && e.op == "stdin" && str("code") == "lost";
  e.attempt = static_cast<int>(attempt);
  e.supervisor = sup > 0 ? static_cast<int>(sup) : -1;
  e.offset = static_cast<uint64_t>(offset);
  e.status = static_cast<int>(status);
  return e;
}

std::string agent_launch_request(const RemoteLaunch& l) {
  json envs = json::array();
  for (const auto& [k, v] : l.env) envs.push_back(k + "=" + v);
  json req{{"op", "launch"},       {"id", l.id},
           {"attempt", l.attempt}, {"dir", l.dir},
           {"record", l.record},   {"nonce", l.nonce},
           {"lease", l.lease},     {"orphan_timeout", l.orphan_timeout},
           {"grace", l.grace},     {"cwd", l.cwd},
           {"fifo", l.fifo},       {"argv", l.argv},
           {"env", envs}};
  if (l.params) req["params"] = *l.params;
  if (l.changes_at_exit) req["changes_at_exit"] = true;
  return req.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string agent_watch_request(const std::string& id, int attempt, const std::string& dir,
                                int supervisor, uint64_t supervisor_started, uint64_t offset,
                                uint64_t times_offset) {
  json req{{"op", "watch"},
           {"id", id},
           {"attempt", attempt},
           {"dir", dir},
           {"supervisor", supervisor},
           {"offset", offset},
           {"times_offset", times_offset}};
  if (supervisor_started != 0) req["supervisor_started"] = supervisor_started;
  return req.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string agent_adopt_request(int64_t req, const std::string& dir, const std::string& path,
                                const std::string& dest, bool again) {
  json j{{"op", "adopt"}, {"req", req}, {"dir", dir}, {"path", path}, {"dest", dest}};
  if (again) j["again"] = true;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string agent_rm_request(int64_t req, const std::string& dir, const std::string& name) {
  return json{{"op", "rm"}, {"req", req}, {"dir", dir}, {"name", name}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::string agent_signal_request(const std::string& id, int attempt, int supervisor, bool now) {
  return json{
      {"op", "signal"}, {"id", id}, {"attempt", attempt}, {"supervisor", supervisor}, {"now", now}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<std::string> agent_stdin_request(const std::string& id, int attempt,
                                               const std::string& dir, const std::string& line,
                                               const std::string& run, uint64_t n) {
  if (line.find('\n') != std::string::npos || util::invalid_utf8_at(line) != std::string::npos ||
      util::invalid_utf8_at(dir) != std::string::npos)
    return std::nullopt;
  return json{{"op", "stdin"}, {"id", id}, {"attempt", attempt}, {"dir", dir}, {"line", line},
              {"run", run},    {"n", n}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tune::exec
