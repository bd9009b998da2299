// A host's attempts' output, on its I/O thread: the bytes its agent's output events carry, and
// looks at stdout.log over SFTP for the rest, handed on with when they arrived.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "exec/ssh_worker.hpp"

namespace tune::exec {

using namespace ssh_impl;

void SshExecutor::Impl::hand_on(Worker& w, Run& r, std::string data, std::vector<Arrival> arrivals,
                                std::optional<HostTime> started, bool carried) {
  // (notes an earlier event carried ahead of their bytes go first)
  if (!r.arrivals_ahead.empty())
    arrivals.insert(arrivals.begin(), r.arrivals_ahead.begin(), r.arrivals_ahead.end());
  r.arrivals_ahead.clear();
  if (!started) started = std::exchange(r.started_ahead, std::nullopt);
  // The trial's pid first, so that its first results carry it too (once per attempt; a trial
  // that ended already has it from its exit record): from its start event, which may have
  // come while this poll ran, or else asked of the host.
  if (!r.child_pid && r.launched_by == w.h.agent_gen) pid_from_events(w, r);
  ask_child_pid(w, r);
  OutputEvent ev(r.id, std::move(data));
  ev.from = r.offset;
  ev.arrivals = std::move(arrivals);
  ev.started = started;
  r.offset += ev.data.size();
  // after an answer to a stdin line read over SFTP, a look then too (its agent holds back what
  // comes within 50 ms of the answer's first bytes; carried, the rest comes in its next event)
  if (r.awaiting_answer && !carried) r.look = true;
  r.awaiting_answer = false;
  w.output_handed_on = true;
  emit(std::move(ev));
  if (r.started_at >= 0) {
    w.stats.first_output_ms.push_back((mono() - r.started_at) * 1000);
    r.started_at = -1;
  }
}

bool SshExecutor::Impl::take_carried(Worker& w, Run& r, const AgentEvent& e) {
  if (r.exited || e.from < 0 || e.size < 0) return false;
  uint64_t from = static_cast<uint64_t>(e.from), times_from = static_cast<uint64_t>(e.times_from);
  // Only bytes that go on from where this driver has read (an event that starts after it
  // would leave a gap; one that ends before it is all read already) and the notes with them.
  if (from > r.offset || from + e.data.size() < r.offset) return false;
  if (times_from > r.times.offset() || times_from + e.times.size() < r.times.offset()) return false;
  std::string fresh = e.data.substr(r.offset - from);
  // (after its supervisor's end, only what it wrote: not bytes another process appended)
  if (r.exit && r.exit->stdout_size)
    fresh.resize(std::min<uint64_t>(
        fresh.size(), *r.exit->stdout_size - std::min(*r.exit->stdout_size, r.offset)));
  std::vector<Arrival> arrivals;
  std::optional<HostTime> started;
  r.times.feed(std::string_view(e.times).substr(r.times.offset() - times_from), arrivals, started);
  if (fresh.empty()) {  // (notes ahead of their bytes: handed on with them)
    r.arrivals_ahead.insert(r.arrivals_ahead.end(), arrivals.begin(), arrivals.end());
    if (started) r.started_ahead = started;
  } else {
    ++w.stats.carried;
    w.stats.carried_bytes += fresh.size();
    hand_on(w, r, std::move(fresh), std::move(arrivals), started, true);
  }
  return r.offset >= static_cast<uint64_t>(e.size);
}

// One look at an attempt's stdout.log: its new bytes, and when they arrived, handed on.
SshExecutor::Impl::Look SshExecutor::Impl::look(Worker& w, Run& r) {
  // All its supervisor wrote is read (its exit record says how much): nothing to look at.
  if (r.exit && r.exit->stdout_size && r.offset >= *r.exit->stdout_size) return Look::kNothing;
  ++w.stats.looks;
  // Its output and the notes of when it arrived, in one round trip (not over SFTP: the trial
  // can make either file a FIFO, whose SFTP open would wait for a writer for ever).
  uint64_t most = kReadChunk;
  // (after its supervisor's end, only what it wrote: not bytes another process appended)
  if (r.exit && r.exit->stdout_size) most = std::min(most, *r.exit->stdout_size - r.offset);
  auto got = w.h.read_ranges({{r.dir + "/stdout.log", r.offset, static_cast<size_t>(most)},
                              {r.dir + "/stdout.times", r.times.offset(), kReadChunk}});
  using Got = SshHost::RangeRead::Got;
  if (!got) {
    check(w);
    r.unread_denied = false;
    r.look = w.up;  // (not read: the next poll tries again)
    return w.up ? Look::kUnread : Look::kNothing;
  }
  w.last_ok = mono();
  auto& out = (*got)[0];
  // no stdout.log yet (its agent says when there is one), or something else in its place (a
  // dir, a FIFO, a link: its supervisor writes on into the file it holds, which the exit
  // record's stdout_size tells from what was read), or it cannot be read
  if (out.got == Got::kMissing || out.got == Got::kNotFile) return Look::kNothing;
  if (out.got == Got::kDenied || out.got == Got::kFailed) {  // (failed: tried again)
    r.unread_denied = out.got == Got::kDenied;
    return Look::kUnread;
  }
  if (out.data.empty()) return Look::kNothing;
  // When it arrived, on the host's clocks (its notes are written before the output; none, or
  // an unreadable file: the controller times it as it reads it).
  std::vector<Arrival> arrivals;
  std::optional<HostTime> started;
  if ((*got)[1].got == Got::kData) r.times.feed((*got)[1].data, arrivals, started);
  bool full = out.data.size() == most;
  hand_on(w, r, std::move(out.data), std::move(arrivals), started, false);
  if (full) r.look = true;  // the rest in the next poll
  return Look::kRead;
}

}  // namespace tune::exec
