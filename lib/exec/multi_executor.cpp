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
  // that comes back with no trial there): the local wait is cut short whenever there are SSH
  // hosts, and Slurm's while any job runs.
  bool ssh = ssh_ != nullptr;
  bool slurm = slurm_ && slurm_->busy();
  auto events = local_.wait(ssh || slurm ? std::min(timeout_s, 0.05) : timeout_s);
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
