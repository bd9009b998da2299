#include "exec/multi_executor.hpp"

#include <algorithm>

#include "checkpoint/adopt.hpp"
#include "util/fs.hpp"

namespace tune::exec {

// The default adoption: on this machine.
Result<void> Executor::adopt(const std::string&, const std::string& reported, const fs::path& cwd,
                             const fs::path& head_trial_dir, const std::string& dest) {
  return checkpoint::adopt(reported, cwd, head_trial_dir, dest);
}

Result<void> Executor::make_staging(const std::string&, const fs::path& head_trial_dir,
                                    const std::string& name) {
  (void)util::remove_tree_nofollow(head_trial_dir, name);
  std::error_code ec;
  fs::create_directory(head_trial_dir / name, ec);
  if (ec) return fail("cannot create ", (head_trial_dir / name).string(), ": ", ec.message());
  return {};
}

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
