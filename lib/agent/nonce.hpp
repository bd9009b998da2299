// Keyed nonces: SipHash-2-4 (Aumasson & Bernstein, 2012) under a 128-bit key given as 32 hex
// digits. The driver derives every attempt's nonce this way (exec/exit_record.hpp); on Slurm the
// supervisor derives it itself, from a per-job key, the job id and SLURM_RESTART_COUNT, because
// a job Slurm requeues runs its batch script again with nobody to hand it a fresh secret.
// Libc only: it is linked into tune-supervisor too.
#pragma once

#include <string>
#include <string_view>

namespace tune::agent {

// Whether `key` is 32 lowercase hex digits.
[[nodiscard]] bool valid_nonce_key(std::string_view key);

// 32 hex digits: the keyed hash of (`name`, `n`). An invalid key counts as all zeros.
[[nodiscard]] std::string keyed_nonce(std::string_view key, std::string_view name, long n);

// The nonce of run `restart_count` (SLURM_RESTART_COUNT) of Slurm job `job_id`, under the job's
// own key (exec::slurm_job_key): what a job's supervisor writes into its exit record.
[[nodiscard]] std::string slurm_run_nonce(std::string_view job_key, std::string_view job_id,
                                          long restart_count);

}  // namespace tune::agent
