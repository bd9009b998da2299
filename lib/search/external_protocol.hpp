// The external searcher's protocol and state, without threads or a child: encoding the ops,
// decoding a suggest answer, the snapshot descriptor the experiment state keeps (and reading it
// back as untrusted input), and the plan of what a resume replays. Used by search/external.cpp,
// which runs them against the child on its worker thread.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "search/searcher.hpp"
#include "util/error.hpp"

namespace tune::search::ext {

// A trial's id as the protocol names it: its index, 5 digits at least ("00007").
[[nodiscard]] std::string trial_id(uint64_t index);
// One JSON line's text (no newline; invalid UTF-8 replaced).
[[nodiscard]] std::string compact(const json& j);

// What the child has been given: the trials it suggested, and those it was told ended.
struct Known {
  std::set<std::string> suggested, completed;
  std::map<std::string, int64_t> told_iteration;  // the last result each trial was told
  uint64_t ops = 0;                               // ops of the journal it has seen
};

// The experiment state's record of a snapshot: {"type": "external", "dir":
// "searcher_state/a" | "searcher_state/b" | null, "suggested", "completed", "ops"}.
[[nodiscard]] json descriptor(const std::optional<std::string>& slot, const Known& k);
// A descriptor read back: what the child had been given, and its slot ("a", "b" or none).
struct Restored {
  Known known;
  std::optional<std::string> slot;
};
[[nodiscard]] Result<Restored> parse_descriptor(const json& state);

// The `complete` op of a finished trial.
[[nodiscard]] json complete_msg(const Completion& c);

// A suggest answer, decoded: a config of the space, wait or finished.
struct Decoded {
  Suggestion::Kind kind = Suggestion::Kind::kWait;
  TrialConfig config;  // with kConfig
};
// Fails, quoting the answer, on anything else or a config outside the space.
[[nodiscard]] Result<Decoded> decode_suggest(const Space& space, const json& answer,
                                             const std::string& id);

// One op a resume sends again.
struct ReplayOp {
  json msg;
  bool suggest = false;   // a suggest (its answer only compared), else a result or complete
  json expected;          // a suggest's: the config the trial has (null if none)
  bool journaled = true;  // from the journal (false: one even the journal missed)
};
// What a resume replays after the snapshot: the journal's ops from `known.ops` on, in their
// order (`ops` holds the journal's from number `base`), then what neither the snapshot nor the
// journal holds, in trial order: a suggest for each trial the searcher gave a config, a
// complete for each finished one. `from` is set to the number the replay starts at (warned when
// the journal and the snapshot disagree).
[[nodiscard]] std::vector<ReplayOp> plan_replay(const std::vector<json>& ops, uint64_t base,
                                                const Known& known,
                                                const std::vector<KnownTrial>& trials,
                                                uint64_t& from);

}  // namespace tune::search::ext
