// `tune run` with a slurm host: the Slurm executor, checked against Slurm once before anything
// runs, and the pool host its trials are placed on.
#include <cmath>

#include "cli/common.hpp"
#include "cli/run_slurm.hpp"
#include "util/error.hpp"

namespace tune::cli {

std::optional<control::ResourcePool::Host> start_slurm(const spec::Experiment& exp,
                                                       const fs::path& dir,
                                                       const exec::LocalOptions& lo,
                                                       std::optional<exec::SlurmExecutor>& out) {
  const spec::HostSpec* h = nullptr;
  for (const auto& x : exp.hosts)
    if (x.kind == spec::HostSpec::Kind::kSlurm) h = &x;
  if (!h) return std::nullopt;
  const auto& s = h->slurm;
  if (s.use_allocation) {
    // Steps of the allocation the driver runs in: it must run in one, and what only a job of
    // its own could have is the allocation's already.
    const char* job = std::getenv("SLURM_JOB_ID");
    if (!job || !*job || std::string(job).find_first_not_of("0123456789") != std::string::npos)
      throw Fatal(exp.source_file.string() +
                  ": hosts.slurm.use_allocation: tune is not running inside a Slurm allocation "
                  "(SLURM_JOB_ID is not set): start it under salloc or sbatch, or drop "
                  "use_allocation to submit a job per trial");
    for (auto [key, set] : {std::pair{"partition", !s.partition.empty()},
                            {"account", !s.account.empty()},
                            {"time_limit", !s.time_limit.empty()},
                            {"sbatch_args", !s.sbatch_args.empty()}})
      if (set)
        throw Fatal(exp.source_file.string() + ": hosts.slurm." + key +
                    " does not go with use_allocation (trials run as steps of the driver's own "
                    "allocation, which has its own)");
  }
  auto supervisor = exec::find_supervisor();
  if (!supervisor) throw Fatal(supervisor.error());
  exec::SlurmOptions so;
  so.job.partition = s.partition;
  so.job.account = s.account;
  so.job.time_limit = s.time_limit;
  so.job.mem = s.mem;
  const auto& req = exp.trial.resources;
  so.job.cpus = s.cpus ? *s.cpus : std::max(1, static_cast<int>(std::ceil(req.cpu)));
  so.job.gpus = s.gpus ? *s.gpus : static_cast<int>(std::ceil(req.gpu));
  so.job.sbatch_args = s.sbatch_args;
  so.job.signal_grace_s = s.signal_grace_s;
  so.max_jobs = s.max_jobs;
  so.exp_name = exp.name;
  so.exp_dir = dir;
  so.supervisor = *supervisor;
  so.lease = lo.lease_file;
  so.orphan_timeout_s = exp.orphan_timeout_s;
  so.record_key = lo.record_key;
  so.use_allocation = s.use_allocation;
  if (const char* p = std::getenv("TUNE_SLURM_POLL_S"); p && std::atof(p) > 0)
    so.poll_s = std::atof(p);
  out.emplace(so, std::make_unique<exec::CommandSlurmClient>());
  if (auto r = out->check(); !r) throw Fatal(exp.source_file.string() + ": " + r.error().message);
  // max_jobs trials at once, each with what it asks for (Slurm enforces the job's own size).
  control::ResourcePool::Host host;
  host.name = out->host_name();
  host.cpus = host.cpu_free = s.max_jobs * std::max(req.cpu, 0.001);
  host.gpu_free.assign(req.gpu > 0 ? static_cast<size_t>(s.max_jobs * std::ceil(req.gpu)) : 0, 1.0);
  host.remote = true;
  host.remote_exp_dir = dir.string();
  host.remote_helpers_dir = python_helpers_dir();
  return host;
}

}  // namespace tune::cli
