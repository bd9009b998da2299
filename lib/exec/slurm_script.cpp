#include "exec/slurm_script.hpp"

#include <cmath>

#include "util/strings.hpp"

namespace tune::exec {

std::string job_name(const std::string& experiment, const std::string& trial_name) {
  return "tune-" + experiment + "-" + trial_name;
}

std::vector<std::string> sbatch_options(const SlurmJobOptions& o, const std::string& name,
                                        const fs::path& trial_dir, const std::string& comment) {
  std::vector<std::string> a = {
      "--job-name=" + name, "--chdir=" + trial_dir.string(),
      // the batch shell's own messages; the trial's go to stdout.log
      "--output=" + (trial_dir / "slurm-%j.out").string(), "--open-mode=append", "--requeue",
      "--ntasks=1",
      "--signal=B:TERM@" + std::to_string(static_cast<long>(std::lround(o.signal_grace_s)))};
  if (!comment.empty()) a.push_back("--comment=" + comment);
  if (!o.partition.empty()) a.push_back("--partition=" + o.partition);
  if (!o.account.empty()) a.push_back("--account=" + o.account);
  if (!o.time_limit.empty()) a.push_back("--time=" + o.time_limit);
  if (o.cpus) a.push_back("--cpus-per-task=" + std::to_string(*o.cpus));
  if (o.gpus && *o.gpus > 0) a.push_back("--gpus=" + std::to_string(*o.gpus));
  if (!o.mem.empty()) a.push_back("--mem=" + o.mem);
  a.insert(a.end(), o.sbatch_args.begin(), o.sbatch_args.end());
  return a;
}

std::vector<std::string> srun_options(const SlurmJobOptions& o, const std::string& name,
                                      const fs::path& trial_dir) {
  std::vector<std::string> a = {"--exclusive",
                                "--ntasks=1",
                                "--nodes=1",
                                "--job-name=" + name,
                                "--chdir=" + trial_dir.string(),
                                "--quiet"};
  a.push_back("--cpus-per-task=" + std::to_string(o.cpus.value_or(1)));
  if (o.gpus && *o.gpus > 0) a.push_back("--gpus=" + std::to_string(*o.gpus));
  if (!o.mem.empty()) a.push_back("--mem=" + o.mem);
  return a;
}

fs::path next_launch_file(const fs::path& slurm_dir, const std::string& trial_name,
                          const std::string& job_id, int restart_count) {
  return slurm_dir / (trial_name + ".job" + job_id + ".next" + std::to_string(restart_count));
}

std::string stub_script(const std::string& name, const fs::path& launch_file,
                        const fs::path& slurm_dir, const std::string& trial_name) {
  std::string q_launch = util::shell_quote(launch_file.string());
  std::string q_next = util::shell_quote((slurm_dir / (trial_name + ".job")).string());
  return "#!/bin/sh\n"
         "# " +
         name +
         ": one attempt of a tune trial (written by tune; see docs/SLURM.md)\n"
         "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then exec /bin/sh " +
         q_launch +
         "; fi\n"
         "# Requeued by Slurm: run what the driver prepared for this run of the job, once.\n"
         "next=" +
         q_next +
         "\"$SLURM_JOB_ID.next$SLURM_RESTART_COUNT\"\n"
         "run=" +
         q_next +
         "\"$SLURM_JOB_ID.run$SLURM_RESTART_COUNT\"\n"
         "if mv \"$next\" \"$run\" 2>/dev/null; then exec /bin/sh \"$run\"; fi\n"
         "echo \"tune: job $SLURM_JOB_ID requeued by Slurm with no attempt prepared (no driver "
         "running); nothing to run: tune run --resume=auto restarts the trial\" >&2\n"
         "exit 0\n";
}

std::string launch_script(const Launch& l, const SupervisorCall& c) {
  std::string s = "#!/bin/sh\n# attempt " + std::to_string(l.attempt) + " of trial " + l.trial_id +
                  " (written by tune)\n";
  for (const auto& [k, v] : l.env) {
    // Slurm sets CUDA_VISIBLE_DEVICES for the job's own GPUs; the driver's pool numbering
    // means nothing on the node.
    if (k == "CUDA_VISIBLE_DEVICES") continue;
    // Names a shell cannot export are left out (the trial gets the rest).
    if (k.empty() ||
        k.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                            "0123456789_") != std::string::npos ||
        (k[0] >= '0' && k[0] <= '9'))
      continue;
    s += "export " + k + "=" + util::shell_quote(v) + "\n";
  }
  auto num = [](double v) { return util::format_double(v); };
  s += "exec " + util::shell_quote(c.supervisor.string()) + " " +
       util::shell_quote(l.trial_dir.string()) + " " + std::to_string(l.attempt) + " " +
       util::shell_quote(c.lease.string()) + " " + num(c.orphan_timeout_s) + " " + num(c.grace_s) +
       " " + util::shell_quote(l.cwd.string()) + " " + (l.stdin_fifo ? "fifo" : "null") + " " +
       util::shell_quote(c.record.string()) + " --";
  for (const auto& w : l.argv) s += " " + util::shell_quote(w);
  s += " <<'TUNE_NONCE'\n" + c.secret + "\nTUNE_NONCE\n";
  return s;
}

}  // namespace tune::exec
