#include "exec/slurm_script.hpp"

#include <cmath>
#include <cstdio>

#include "util/fs.hpp"
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

std::vector<std::string> step_command(const fs::path& launch_file, const fs::path& run_file,
                                      const fs::path& step_id_file) {
  // Positional arguments, so no path is ever parsed by the shell.
  static const char* claim =
      "printf '%s.%s\\n' \"$SLURM_JOB_ID\" \"$SLURM_STEP_ID\" >\"$3.tmp\" && mv -f \"$3.tmp\" "
      "\"$3\" || exit 1\n"
      "if ! mv -f \"$1\" \"$2\" 2>/dev/null; then\n"
      "  echo \"tune: $1 is gone (a resumed driver gave this attempt up): nothing started\" >&2\n"
      "  exit 0\n"
      "fi\n"
      "exec /bin/sh \"$2\"\n";
  return {"/bin/sh",
          "-c",
          claim,
          "tune-step",
          launch_file.string(),
          run_file.string(),
          step_id_file.string()};
}

StepClaim void_step_launch(const fs::path& launch_file, const fs::path& run_file,
                           const fs::path& void_file) {
  // Both are renames in one directory: whoever renames the launch file first wins.
  if (::rename(launch_file.c_str(), void_file.c_str()) == 0) return StepClaim::kVoided;
  std::error_code ec;
  return fs::exists(fs::symlink_status(run_file, ec)) ? StepClaim::kClaimed : StepClaim::kNone;
}

fs::path next_launch_file(const fs::path& slurm_dir, const std::string& trial_name,
                          const std::string& job_id, int restart_count) {
  return slurm_dir / (trial_name + ".job" + job_id + ".next" + std::to_string(restart_count));
}

fs::path claim_dir(const fs::path& slurm_dir, const std::string& trial_name,
                   const std::string& job_id, int restart_count) {
  return slurm_dir / (trial_name + ".job" + job_id + ".claim" + std::to_string(restart_count));
}

std::optional<SelfRerun> read_self_rerun(const fs::path& slurm_dir, const std::string& trial_name,
                                         const std::string& job_id, int restart_count,
                                         std::string* problem) {
  if (restart_count < 1) return std::nullopt;
  fs::path path = claim_dir(slurm_dir, trial_name, job_id, restart_count) / "self";
  auto bad = [&](const std::string& why) -> std::optional<SelfRerun> {
    if (problem) *problem = path.string() + ": " + why;
    return std::nullopt;
  };
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;  // no rerun noted
  auto text = util::read_file(path, 256);
  if (!text) return bad(text.error().message);
  // "SIZE CHECKPOINT" (CHECKPOINT: checkpoint_NNNNNN, or - for none)
  size_t sp = text->find(' ');
  if (sp == 0 || sp == std::string::npos || sp > 19)
    return bad("not 'SIZE CHECKPOINT' ('" + util::printable(*text, 60) + "')");
  std::string size = text->substr(0, sp), ck = text->substr(sp + 1);
  while (!ck.empty() && (ck.back() == '\n' || ck.back() == ' ')) ck.pop_back();
  if (size.find_first_not_of("0123456789") != std::string::npos)
    return bad("its size is not a number ('" + util::printable(size, 30) + "')");
  if (ck != "-" && (!ck.starts_with("checkpoint_") || ck.size() > 40 ||
                    ck.find_first_not_of("0123456789", 11) != std::string::npos))
    return bad("not a checkpoint_NNNNNN or - ('" + util::printable(ck, 50) + "')");
  return SelfRerun{std::strtoull(size.c_str(), nullptr, 10), ck == "-" ? "" : ck};
}

std::string stub_script(const std::string& name, const fs::path& launch_file,
                        const fs::path& slurm_dir, const std::string& trial_name,
                        const fs::path& trial_dir) {
  std::string q_launch = util::shell_quote(launch_file.string());
  std::string q_base = util::shell_quote((slurm_dir / (trial_name + ".job")).string());
  std::string q_dir = util::shell_quote(trial_dir.string());
  return "#!/bin/sh\n# " + name +
         ": one attempt of a tune trial (written by tune; see docs/SLURM.md)\n"
         "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then exec /bin/sh " +
         q_launch +
         "; fi\n"
         "# Requeued by Slurm: this run is the trial's next attempt. Run what the driver prepared\n"
         "# for it, once; else (no driver claimed this run) run it from the latest checkpoint.\n"
         "k=$SLURM_RESTART_COUNT\n"
         "base=" +
         q_base +
         "\"$SLURM_JOB_ID\"\n"
         "if mv \"$base.next$k\" \"$base.run$k\" 2>/dev/null; then exec /bin/sh \"$base.run$k\"; "
         "fi\n"
         "if mkdir \"$base.claim$k\" 2>/dev/null; then\n"
         "  latest=\n"
         "  for d in " +
         q_dir +
         "/checkpoint_[0-9][0-9][0-9][0-9][0-9][0-9]*; do\n"
         "    [ -d \"$d\" ] && [ ! -L \"$d\" ] && latest=$d\n"
         "  done\n"
         "  size=$(( $(wc -c < " +
         q_dir +
         "/stdout.log 2>/dev/null || echo 0) + 0 ))\n"
         "  ck=${latest##*/}\n"
         "  printf '%s %s\\n' \"$size\" \"${ck:--}\" > \"$base.claim$k/self.tmp\" &&\n"
         "    mv \"$base.claim$k/self.tmp\" \"$base.claim$k/self\" || exit 1\n"
         "  echo \"tune: job $SLURM_JOB_ID requeued by Slurm: run $k starts the trial's next "
         "attempt from ${latest:-scratch} (no driver prepared it)\" >&2\n"
         "  export TUNE_SLURM_RERUN=1 TUNE_SLURM_RESTORE=\"$latest\"\n"
         "  exec /bin/sh " +
         q_launch +
         "\n"
         "fi\n"
         "# The driver claimed this run: its launch file is on its way.\n"
         "i=0\n"
         "while [ $i -lt 60 ]; do\n"
         "  if mv \"$base.next$k\" \"$base.run$k\" 2>/dev/null; then exec /bin/sh \"$base.run$k\"; "
         "fi\n"
         "  sleep 1; i=$((i + 1))\n"
         "done\n"
         "echo \"tune: job $SLURM_JOB_ID requeued by Slurm: the driver claimed run $k but prepared "
         "nothing; nothing to run\" >&2\n"
         "exit 0\n";
}

std::string launch_script(const Launch& l, const SupervisorCall& c) {
  std::string s = "#!/bin/sh\n# attempt " + std::to_string(l.attempt) + " of trial " + l.trial_id +
                  " (written by tune)\n";
  std::string attempt = std::to_string(l.attempt);
  if (c.rerun) {  // a rerun Slurm started on its own: the attempt after, from the latest checkpoint
    s += "attempt=" + attempt +
         "\n"
         "[ -n \"${TUNE_SLURM_RERUN:-}\" ] && attempt=$((attempt + ${SLURM_RESTART_COUNT:-0}))\n";
    attempt = "\"$attempt\"";
  }
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
  if (c.rerun)
    s += "if [ -n \"${TUNE_SLURM_RERUN:-}\" ]; then\n"
         "  if [ -n \"${TUNE_SLURM_RESTORE:-}\" ]; then export "
         "TUNE_RESTORE_CHECKPOINT=\"$TUNE_SLURM_RESTORE\"; else unset TUNE_RESTORE_CHECKPOINT; fi\n"
         "fi\n"
         "unset TUNE_SLURM_RERUN TUNE_SLURM_RESTORE\n";
  auto num = [](double v) { return util::format_double(v); };
  s += "exec " + util::shell_quote(c.supervisor.string()) + " " +
       util::shell_quote(l.trial_dir.string()) + " " + attempt + " " +
       util::shell_quote(c.lease.string()) + " " + num(c.orphan_timeout_s) + " " + num(c.grace_s) +
       " " + util::shell_quote(l.cwd.string()) + " " + (l.stdin_fifo ? "fifo" : "null") + " " +
       util::shell_quote(c.record.string()) + " --";
  for (const auto& w : l.argv) s += " " + util::shell_quote(w);
  s += " <<'TUNE_NONCE'\n" + c.secret + "\nTUNE_NONCE\n";
  return s;
}

}  // namespace tune::exec
