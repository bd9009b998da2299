#include "search/external_protocol.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "search/external.hpp"
#include "search/space_json.hpp"
#include "util/strings.hpp"

namespace tune::search::ext {

std::string trial_id(uint64_t index) {
  char id[32];
  std::snprintf(id, sizeof id, "%05llu", static_cast<unsigned long long>(index));
  return id;
}

std::string compact(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json descriptor(const std::optional<std::string>& slot, const Known& k) {
  return {{"type", "external"},
          {"dir", slot ? json(std::string(kSearcherStateDir) + "/" + *slot) : json(nullptr)},
          {"suggested", k.suggested},
          {"completed", k.completed},
          {"ops", k.ops}};
}

Result<Restored> parse_descriptor(const json& state) {
  auto bad = [](const std::string& what) { return fail("searcher state (external): ", what); };
  if (!state.is_object() || state.value("type", "") != "external")
    return bad("not an external searcher's state");
  const json& dir = state.value("dir", json());
  Restored r;
  for (const char* key : {"suggested", "completed"}) {
    const json& ids = state.value(key, json::array());
    if (!ids.is_array()) return bad(std::string("'") + key + "' is not a list");
    for (const auto& id : ids) {
      if (!id.is_string()) return bad(std::string("'") + key + "' holds a non-string");
      (key[0] == 's' ? r.known.suggested : r.known.completed).insert(id.get<std::string>());
    }
  }
  const json& ops = state.value("ops", json(0));
  if (!ops.is_number_unsigned()) return bad("'ops' is not a count");
  r.known.ops = ops.get<uint64_t>();
  if (!dir.is_null()) {
    std::string want_a = std::string(kSearcherStateDir) + "/a";
    std::string want_b = std::string(kSearcherStateDir) + "/b";
    if (!dir.is_string() || (dir != want_a && dir != want_b))
      return bad("'dir' is not " + want_a + " or " + want_b);
    r.slot = dir.get<std::string>().substr(dir.get<std::string>().size() - 1);
  }
  return r;
}

json complete_msg(const Completion& c) {
  return {{"op", "complete"},
          {"trial_id", c.trial},
          {"result", c.result.is_object() ? c.result : json(nullptr)},
          {"status", c.error ? "ERROR" : "TERMINATED"},
          {"config", c.config}};
}

Result<Decoded> decode_suggest(const Space& space, const json& j, const std::string& id) {
  Decoded d;
  if (j.contains("config")) {
    auto c = config_from_answer(space, j["config"]);
    if (!c)
      return fail("answered '", util::printable(compact(j), 120), "' to suggest (trial ", id,
                  "): ", c.error().message);
    d.kind = Suggestion::Kind::kConfig;
    d.config = std::move(*c);
  } else if (j.value("wait", json()) == true) {
    d.kind = Suggestion::Kind::kWait;
  } else if (j.value("finished", json()) == true) {
    d.kind = Suggestion::Kind::kFinished;
  } else {
    return fail("answered '", util::printable(compact(j), 120), "' to suggest (trial ", id,
                "): expected {\"config\": {...}}, {\"wait\": true} or {\"finished\": true}");
  }
  return d;
}

std::vector<ReplayOp> plan_replay(const std::vector<json>& ops, uint64_t base, const Known& known,
                                  const std::vector<KnownTrial>& trials, uint64_t& from) {
  std::map<std::string, json> config_of;
  for (const auto& t : trials) config_of[t.id] = t.config;
  Known seen = known;  // what the child will have been told once the replay is done
  // ops[i] is op number base + i of the experiment; the snapshot holds those below known.ops.
  from = known.ops;
  if (base + ops.size() < from) {
    spdlog::warn(
        "external searcher: its op journal ends at op {}, its snapshot names {}: "
        "nothing is replayed from it",
        base + ops.size(), from);
    from = base + ops.size();
  } else if (from < base) {
    spdlog::warn(
        "external searcher: its op journal starts at op {}, its snapshot names {}: "
        "the ops between are lost",
        base, from);
    from = base;
  }
  std::vector<ReplayOp> out;
  for (uint64_t i = from - base; i < ops.size(); ++i) {
    const json& op = ops[i];
    const json& id = op.value("trial_id", json());
    if (!id.is_string()) continue;
    std::string tid = id.get<std::string>();
    if (op["op"] == "suggest") {
      ReplayOp r{{{"op", "suggest"}, {"trial_id", tid}}, true, nullptr, true};
      if (auto it = config_of.find(tid); it != config_of.end()) r.expected = it->second;
      out.push_back(std::move(r));
      seen.suggested.insert(tid);
    } else if (op["op"] == "result" || op["op"] == "complete") {
      out.push_back({op, false, nullptr, true});
      if (op["op"] == "complete") seen.completed.insert(tid);
    }
  }
  // Trials the journal lost (queued, never written, when the driver died): in trial order.
  for (const auto& t : trials) {
    if (t.suggested && !seen.suggested.count(t.id))
      out.push_back({{{"op", "suggest"}, {"trial_id", t.id}}, true, t.config, false});
    if (t.finished && !seen.completed.count(t.id))
      out.push_back({complete_msg(t.completion), false, nullptr, false});
  }
  return out;
}

}  // namespace tune::search::ext
