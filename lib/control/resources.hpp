// Host capacity and GPU assignment.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/ledger.hpp"
#include "spec/experiment.hpp"

namespace tune::control {

// Where one trial runs and what it holds there.
struct Placement {
  size_t host = 0;
  double cpu = 0;
  double gpu = 0;
  std::vector<int> gpu_ids;  // the GPUs in CUDA_VISIBLE_DEVICES
  [[nodiscard]] std::string cuda_visible_devices() const;
};

// Tracks free CPUs and per-GPU free fractions on each host. Whole-GPU requests get distinct
// GPUs; a fraction below 1 shares one GPU with other fractions while they fit. A host with a
// ledger (this machine) also shares with this user's other experiments: see acquire().
class ResourcePool {
 public:
  struct Host {
    std::string name;
    double cpus = 1;
    std::vector<double> gpu_free;  // 1.0 = idle
    double cpu_free = 1;
    // SSH hosts: where the experiment and the Python helper are on the host.
    bool remote = false;
    std::string remote_exp_dir, remote_helpers_dir;
    bool available = true;  // false while an SSH host is unreachable
    // This machine, shared with other experiments through the host-wide ledger (null: alone).
    std::shared_ptr<Ledger> ledger;
    double machine_cpus = 0;    // the machine's CPU count (with a ledger)
    bool ledger_stale = false;  // released since the ledger was last written (see release())
  };
  explicit ResourcePool(std::vector<Host> hosts) : hosts_(std::move(hosts)) {}

  // A placement for `req` on the first host with room, or nullopt. On a host with a ledger,
  // room also means: no GPU that another live experiment holds; CPUs held by all experiments
  // together within the machine's count (or this experiment's configured cpus, if larger);
  // and, while another experiment waits for CPUs, no more than an equal share of them.
  [[nodiscard]] std::optional<Placement> acquire(const spec::Resources& req);
  // The placement of a trial that is already running (re-attached after a driver crash): its
  // CPUs and the GPUs it holds are taken on the first host even beyond capacity.
  [[nodiscard]] Placement acquire_exact(const spec::Resources& req, const std::vector<int>& gpu_ids,
                                        size_t host = 0);
  // Gives back what `p` holds. The ledger is written at the next acquire() on that host or
  // the next sync_ledger(), whichever comes first: a trial that ends and the one started in
  // its place cost one ledger write, not two. Until then the ledger says too much, never too
  // little.
  void release(const Placement& p);
  // Writes the ledger of every host released on since its last write (once per loop turn).
  void sync_ledger();
  // An SSH host went down or came back: no placements on it while it is down.
  void set_available(const std::string& host, bool up);
  // True if some host with room for `req` is available.
  [[nodiscard]] bool any_available() const;
  // The index of the host named `name`, if any.
  [[nodiscard]] std::optional<size_t> find(const std::string& name) const;
  // True if `req` could ever fit on some host (else the trial can never run).
  [[nodiscard]] bool fits_somewhere(const spec::Resources& req) const;
  [[nodiscard]] const std::vector<Host>& hosts() const { return hosts_; }

 private:
  // Where `req` would go on host `h` (nothing changes), avoiding the GPUs in `taken`.
  [[nodiscard]] std::optional<Placement> plan(size_t h, const spec::Resources& req,
                                              const std::set<int>& taken) const;
  // Takes what `p` names from its host.
  void take(const Placement& p);
  // acquire() on a host with a ledger: plan, check with the others' holdings, take, record.
  [[nodiscard]] std::optional<Placement> acquire_shared(size_t h, const spec::Resources& req);
  // Records what host `h` holds now in its ledger (after a release or a re-attach).
  void record(size_t h);

  std::vector<Host> hosts_;
  double next_wait_log_ = 0;  // wall clock: "waiting for other experiments" at most this often
};

// How many trials needing `req` fit at once on `hosts` (by their configured capacity).
[[nodiscard]] size_t trials_that_fit(const std::vector<ResourcePool::Host>& hosts,
                                     const spec::Resources& req);
// Why fewer trials than max_concurrent_trials run at once, in one line ("max_concurrent_trials
// is 8 but at most 2 trials fit at once: local 2 CPUs, 1 CPU per trial"); empty if they all fit.
[[nodiscard]] std::string concurrency_note(const std::vector<ResourcePool::Host>& hosts,
                                           const spec::Resources& req,
                                           std::optional<int> max_concurrent);

// The `local` entry of the experiment's hosts (none if it lists only SSH hosts).
[[nodiscard]] std::vector<ResourcePool::Host> local_hosts(const spec::Experiment& exp);

// This machine's CPU count and NVIDIA GPU count (/dev/nvidiaN).
[[nodiscard]] int local_cpu_count();
[[nodiscard]] int local_gpu_count();

}  // namespace tune::control
