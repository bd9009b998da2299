// The external searcher: any optimizer as a long-lived child process speaking JSON lines
// (docs/SEARCH.md has the protocol). All I/O with the child happens on a worker thread; the
// controller's loop only queues requests and collects answers, so it never blocks on the child
// (except in finish(), at the very end of a run, for a last snapshot).
//
// Resume consistency: the worker tracks which trials the child has been given (suggested with
// a config, completed); a snapshot ({"op":"save"}) records those sets with its directory, and
// save() hands the controller only acknowledged snapshots. Snapshots alternate between two
// directories, never overwriting the one the state on disk names. Every op is journaled before
// it is sent (search/op_journal.hpp); once a state write names a snapshot, the journal drops
// the ops that snapshot holds. On a resume, start() gives the child its snapshot at init, then
// replays the journal's ops after it, in their order (a replayed `suggest`'s answer is only
// compared), then what even the journal missed, in trial order: a `suggest` for each trial it
// never suggested and a `complete` for each finished trial it was not told about.
#pragma once

#include <memory>

#include "search/searcher.hpp"

namespace tune::search {

// The largest line an external searcher may answer (bytes): a longer one is an error.
inline constexpr size_t kMaxSearcherLine = 1 << 20;
// Its stderr, appended, in the experiment dir.
inline constexpr const char* kSearcherLog = "searcher.log";
// Its snapshots: <experiment dir>/searcher_state/{a,b}.
inline constexpr const char* kSearcherStateDir = "searcher_state";

// An external searcher over `space`; fails naming search_alg.command when the command is
// missing or not executable. The child starts in start().
[[nodiscard]] Result<std::unique_ptr<Searcher>> make_external_searcher(const ExternalOptions& o,
                                                                       const Space& space,
                                                                       uint64_t num_samples,
                                                                       uint64_t seed,
                                                                       const SearcherContext& ctx);

}  // namespace tune::search
