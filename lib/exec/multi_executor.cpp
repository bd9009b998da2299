#include "exec/multi_executor.hpp"

#include <algorithm>

namespace tune::exec {

Result<void> MultiExecutor::start(const Launch& l) {
  return route(l).start(l);
}

Result<Attached> MultiExecutor::attach(const Launch& l) {
  return route(l).attach(l);
}

std::vector<Event> MultiExecutor::wait(double timeout_s) {
  // Remote hosts' events are queued by their own threads at any time (output, exits, a host
  // that comes back with no trial there): the local wait ends as soon as one is queued (the
  // SSH executor's ready_fd, which a local executor also waits on), or is cut short where it
  // cannot be told (a local executor that is not one), and while any Slurm job runs.
  bool ssh = ssh_ != nullptr;
  bool slurm = slurm_ && slurm_->busy();
  bool told = ssh && woken_by_ssh_;
  auto events = local_.wait((ssh && !told) || slurm ? std::min(timeout_s, 0.05) : timeout_s);
  if (ssh || slurm) {
    for (Executor* x : {static_cast<Executor*>(ssh ? ssh_ : nullptr),
                        static_cast<Executor*>(slurm ? slurm_ : nullptr)}) {
      if (!x) continue;
      for (auto& e : x->wait(0)) events.push_back(std::move(e));
    }
    // interrupts first, then output, then exits (the controller relies on the order)
    std::stable_partition(events.begin(), events.end(),
                          [](const Event& e) { return std::holds_alternative<InterruptEvent>(e); });
  }
  return events;
}

}  // namespace tune::exec
