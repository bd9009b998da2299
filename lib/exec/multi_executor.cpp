#include "exec/multi_executor.hpp"

#include <algorithm>

namespace tune::exec {

Result<void> MultiExecutor::start(const Launch& l) {
  remote_ids_[l.trial_id] = !l.host.empty();
  return l.host.empty() ? local_.start(l) : remote_.start(l);
}

Result<Attached> MultiExecutor::attach(const Launch& l) {
  remote_ids_[l.trial_id] = !l.host.empty();
  return l.host.empty() ? local_.attach(l) : remote_.attach(l);
}

std::vector<Event> MultiExecutor::wait(double timeout_s) {
  // Remote trials are polled every 0.2 s: the local wait is cut short while any run there.
  bool remote = remote_.busy();
  auto events = local_.wait(remote ? std::min(timeout_s, 0.05) : timeout_s);
  if (remote) {
    auto more = remote_.wait(0);
    for (auto& e : more) events.push_back(std::move(e));
    // interrupts first, then output, then exits (the controller relies on the order)
    std::stable_partition(events.begin(), events.end(),
                          [](const Event& e) { return std::holds_alternative<InterruptEvent>(e); });
  }
  return events;
}

}  // namespace tune::exec
