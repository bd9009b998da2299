#include "report/decisions.hpp"

#include <algorithm>
#include <fstream>

#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/strings.hpp"

namespace tune::report {

using json = nlohmann::json;

const char* mark_kind_name(MarkKind k) {
  switch (k) {
    case MarkKind::kStopped:
      return "stopped";
    case MarkKind::kMaxT:
      return "max_t";
    case MarkKind::kPaused:
      return "paused";
    case MarkKind::kExploited:
      return "exploited";
  }
  return "?";
}

namespace {

// The decision the state holds about `t` (its end reason, or a pause, or an exploit decided
// but not carried out yet); false when it has none.
bool state_mark(const trial::Trial& t, const std::string& scheduler, Mark& m) {
  bool pending = t.cause == trial::Cause::kExploit && t.reason == trial::Reason::kPaused &&
                 t.pending_exploit.is_object();
  if (t.reason == trial::Reason::kStopped)
    m.kind = t.cause == trial::Cause::kMaxT ? MarkKind::kMaxT : MarkKind::kStopped;
  else if (pending)
    m.kind = MarkKind::kExploited;
  else if (t.reason == trial::Reason::kPaused && t.cause != trial::Cause::kExploit)
    m.kind = MarkKind::kPaused;
  else
    return false;                          // an exploit carried out is in pbt_policy.jsonl
  m.x = static_cast<double>(t.iteration);  // its last row: where the decision was taken
  m.text = trial::describe_decision(t, scheduler);
  return true;
}

// The exploits carried out: pbt_policy.jsonl's lines {trial, donor, at, ...}.
void policy_marks(const state::ExperimentState& s, const std::filesystem::path& exp_dir,
                  const std::map<std::string, std::string>& names,
                  std::map<std::string, std::vector<Mark>>& out) {
  if (s.pbt_policy_bytes == 0) return;
  if (!util::is_regular_file_at(exp_dir / "pbt_policy.jsonl")) return;  // absent, or a FIFO
  std::ifstream in(exp_dir / "pbt_policy.jsonl", std::ios::binary);
  std::string line;
  uint64_t read = 0;
  while (read < s.pbt_policy_bytes && std::getline(in, line)) {
    read += line.size() + 1;
    json j = util::parse_json_ext(line, 16);
    if (!j.is_object() || !j["trial"].is_string() || !j["donor"].is_string() ||
        !j["at"].is_number())
      continue;
    auto id = j["trial"].get<std::string>(), donor = j["donor"].get<std::string>();
    if (!names.count(id)) continue;
    auto dn = names.find(donor);
    double at = j["at"].get<double>();
    // On the curve: where it goes on from (the donor's checkpoint's iteration).
    double x = j["donor_iteration"].is_number() ? j["donor_iteration"].get<double>() : at;
    out[id].push_back({x, MarkKind::kExploited,
                       "exploited " + (dn != names.end() ? dn->second : donor) + " at " +
                           util::format_double(at)});
  }
}

}  // namespace

std::map<std::string, std::vector<Mark>> read_decisions(const state::ExperimentState& s,
                                                        const std::filesystem::path& exp_dir) {
  std::string scheduler = "the scheduler";
  if (s.scheduler.is_object())
    if (auto it = s.scheduler.find("type"); it != s.scheduler.end() && it->is_string())
      scheduler = it->get<std::string>();
  std::map<std::string, std::string> names;
  for (const auto& t : s.trials) names[t.id] = t.name;
  std::map<std::string, std::vector<Mark>> out;
  policy_marks(s, exp_dir, names, out);
  for (const auto& t : s.trials) {
    Mark m;
    if (state_mark(t, scheduler, m)) out[t.id].push_back(std::move(m));
  }
  for (auto& [id, marks] : out)
    std::stable_sort(marks.begin(), marks.end(),
                     [](const Mark& a, const Mark& b) { return a.x < b.x; });
  return out;
}

}  // namespace tune::report
