// A host going down and coming back, on its I/O thread: marked down when an operation finds
// the link gone, reconnected with backoff, and declared lost host_timeout_s after its last
// answer (or at once when its host key changed), its attempts then ending as host_lost.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "exec/ssh_worker.hpp"
#include "util/strings.hpp"

namespace tune::exec {

using namespace ssh_impl;

void SshExecutor::Impl::mark_down(Worker& w, double now) {
  if (!w.up) return;
  w.up = false;
  // Silent since its last answer: the timeouts that noticed it count toward host_timeout_s,
  // so it is declared lost host_timeout_s after the link went, not after they ran out.
  w.down_since = w.last_ok > 0 ? std::min(now, w.last_ok) : now;
  w.backoff = 1;
  w.next_retry = now + w.backoff;
  spdlog::warn("host {}: connection lost ({}); reconnecting, its trials keep running there", w.name,
               w.h.err());
  // (failed: an adoption's checkpoint is not taken, a deletion is left; the agent may carry
  // them out all the same)
  settle_file_ops(w, "");
  emit(HostEvent{w.name, false});
}

// After an operation failed: is the host down?
void SshExecutor::Impl::check(Worker& w) {
  if (w.up && w.h.broken()) mark_down(w, mono());
}

// Down past host_timeout_s, or its key changed: its attempts end as host_lost (re-queued
// elsewhere by the controller); their supervisors are stopped if it comes back.
void SshExecutor::Impl::lose(Worker& w, double now) {
  w.lost = true;
  if (w.h.key_changed)
    spdlog::warn("host {}: its host key changed: its trials are re-queued", w.name);
  else
    spdlog::warn("host {}: unreachable for {:.0f} s: its trials are re-queued", w.name,
                 now - w.down_since);
  for (auto it = w.runs.begin(); it != w.runs.end();) {
    Run& r = it->second;
    drop_sync(r);
    if (r.exited) {  // it ended before the link went: only its end-of-trial sync is lost
      emit(ExitEvent{it->first, *r.exit});
      it = w.runs.erase(it);
      continue;
    }
    if (r.sup_pid > 0) w.superseded.push_back(r.sup_pid);
    ExitInfo info;
    info.attempt = r.attempt;
    info.reason = ExitReason::kHostLost;
    info.error = w.h.key_changed ? "host " + w.name + ": its host key changed"
                                 : "host " + w.name + " unreachable for " +
                                       util::format_short(now - w.down_since) + " s";
    emit(ExitEvent{it->first, info});
    it = w.runs.erase(it);
  }
}

// A down host: reconnects with backoff (each try bounded so that the host is declared lost
// within a second of host_timeout_s), and re-queues its trials once lost.
void SshExecutor::Impl::tend(Worker& w, double now) {
  if (w.up) return;
  if (!w.lost && (w.h.key_changed || now - w.down_since > opts.host_timeout_s)) lose(w, now);
  if (w.h.key_changed || now < w.next_retry) return;
  double left = w.lost ? 5.0 : opts.host_timeout_s - (now - w.down_since);
  auto result = w.h.open(opts, left);
  now = mono();
  if (result) {
    w.up = true;
    w.last_ok = now;
    w.heard_agent();  // (its "ready" line: the lines below go to it)
    spdlog::warn("host {}: reconnected after {:.1f} s", w.name, now - w.down_since);
    for (int pid : w.superseded)  // attempts re-queued elsewhere meanwhile
      (void)w.h.shell_run("kill -TERM " + std::to_string(pid) + " 2>/dev/null; true");
    w.superseded.clear();
    end_unsure_launches(w, w.h.agent_pid);  // launches the old agent never answered
    // Stops asked while it was down, or of the old agent (a second SIGTERM is no harm), and
    // the stdin lines no agent said written: the old agent may have written them, its
    // "written" lost with the link, or may write them yet; the host's record says which went.
    for (auto& [id, r] : w.runs) {
      if (r.exit || r.exited) continue;
      if (r.stop_asked > 0) {
        r.stop_by = -1;
        stop_in_shell(w, r);
      }
      for (auto& l : r.unwritten) l.by = -1;
      deliver_stdin(w, r);
    }
    w.lost = false;
    emit(HostEvent{w.name, true});
    return;
  }
  if (w.h.key_changed) {
    spdlog::error("host {}: {}; it is not used again in this run", w.name, result.error().message);
    if (!w.lost) lose(w, now);
    return;
  }
  spdlog::debug("host {}: reconnect failed: {}", w.name, result.error().message);
  w.backoff = std::min(w.backoff * 2, 10.0);
  w.next_retry = now + w.backoff;
  if (!w.lost && now - w.down_since > opts.host_timeout_s) lose(w, now);
}

}  // namespace tune::exec
