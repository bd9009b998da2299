// Routes trials to the local executor, the SSH executor or the Slurm executor by the host they
// are placed on; one wait() for all (the local one owns the signal fd, so Ctrl-C is seen at once).
#pragma once

#include <unordered_map>

#include "exec/executor.hpp"
#include "exec/local_executor.hpp"
#include "exec/slurm_executor.hpp"
#include "exec/ssh_executor.hpp"

namespace tune::exec {

class MultiExecutor final : public Executor {
 public:
  MultiExecutor(Executor& local, SshExecutor& remote) : local_(local), ssh_(&remote) {
    wake_on_ssh();
  }
  // Either remote executor may be null; trials placed on `slurm->host_name()` go to Slurm.
  MultiExecutor(Executor& local, SshExecutor* ssh, SlurmExecutor* slurm)
      : local_(local), ssh_(ssh), slurm_(slurm) {
    wake_on_ssh();
  }

  Result<void> start(const Launch& l) override;
  Result<Attached> attach(const Launch& l) override;
  void send(const std::string& id, std::string_view line) override { of(id).send(id, line); }
  void stop(const std::string& id, bool now) override { of(id).stop(id, now); }
  std::vector<Event> wait(double timeout_s) override;
  std::optional<int> pid(const std::string& id) override { return of(id).pid(id); }
  double now() override { return local_.now(); }
  double wall_time() override { return local_.wall_time(); }
  std::string host_name() override { return local_.host_name(); }
  void renew_lease() override {
    local_.renew_lease();
    if (ssh_) ssh_->renew_lease();
  }
  Result<void> adopt(const std::string& id, const std::string& reported, const fs::path& cwd,
                     const fs::path& head_trial_dir, const std::string& dest) override {
    return of(id).adopt(id, reported, cwd, head_trial_dir, dest);
  }
  std::function<Result<void>()> adopt_task(const std::string& id, const std::string& reported,
                                           const fs::path& cwd, const fs::path& head_trial_dir,
                                           const std::string& dest) override {
    return of(id).adopt_task(id, reported, cwd, head_trial_dir, dest);
  }
  Result<void> make_staging(const std::string& id, const fs::path& head_trial_dir,
                            const std::string& name) override {
    return of(id).make_staging(id, head_trial_dir, name);
  }
  void remove_checkpoint(const std::string& host, const fs::path& head_trial_dir,
                         const std::string& name) override {
    if (!host.empty() && ssh_ && !is_slurm(host))
      ssh_->remove_checkpoint(host, head_trial_dir, name);
  }
  std::vector<std::string> fetch_checkpoints(const std::string& host,
                                             const fs::path& head_trial_dir,
                                             const std::vector<std::string>& names) override {
    return host.empty() || !ssh_ || is_slurm(host)
               ? std::vector<std::string>{}
               : ssh_->fetch_checkpoints(host, head_trial_dir, names);
  }
  std::vector<LiveAttempt> live_attempts() override {
    auto all = local_.live_attempts();
    if (ssh_)
      for (auto& a : ssh_->live_attempts()) all.push_back(std::move(a));
    if (slurm_)
      for (auto& a : slurm_->live_attempts()) all.push_back(std::move(a));
    return all;
  }
  void end_attempts(const std::vector<LiveAttempt>& which, double grace_s) override {
    std::vector<LiveAttempt> here, there, cluster;
    for (const auto& a : which)
      (a.host.empty() ? here : is_slurm(a.host) ? cluster : there).push_back(a);
    if (!here.empty()) local_.end_attempts(here, grace_s);
    if (!cluster.empty()) slurm_->end_attempts(cluster, grace_s);
    if (!there.empty() && ssh_) ssh_->end_attempts(there, grace_s);
  }
  void checkpoint_registered(const std::string& id) override { of(id).checkpoint_registered(id); }
  void checkpoint_dropped(const std::string& id, const std::string& name) override {
    of(id).checkpoint_dropped(id, name);
  }
  std::vector<std::pair<std::string, std::string>> take_job_ids() override {
    return slurm_ ? slurm_->take_job_ids() : std::vector<std::pair<std::string, std::string>>{};
  }

 private:
  // The local wait wakes for the SSH hosts' events (when the local executor is the real one).
  void wake_on_ssh() {
    auto* local = dynamic_cast<LocalExecutor*>(&local_);
    if (ssh_ && local && ssh_->ready_fd() >= 0) {
      local->also_wake_on(ssh_->ready_fd());
      woken_by_ssh_ = true;
    }
  }
  bool is_slurm(const std::string& host) const { return slurm_ && host == slurm_->host_name(); }
  Executor& route(const Launch& l) {
    Executor* e = &local_;
    if (is_slurm(l.host))
      e = slurm_;
    else if (!l.host.empty() && ssh_)
      e = ssh_;
    by_id_[l.trial_id] = e;
    return *e;
  }
  Executor& of(const std::string& id) {
    auto it = by_id_.find(id);
    return it != by_id_.end() ? *it->second : local_;
  }
  Executor& local_;
  SshExecutor* ssh_ = nullptr;
  SlurmExecutor* slurm_ = nullptr;
  std::unordered_map<std::string, Executor*> by_id_;  // trial id -> the executor it runs on
  bool woken_by_ssh_ = false;
};

}  // namespace tune::exec
