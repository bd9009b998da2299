// `tune run`'s setup of a slurm host (lib/exec/slurm_executor.hpp).
#pragma once

#include <filesystem>
#include <optional>

#include "control/resources.hpp"
#include "exec/local_executor.hpp"
#include "exec/slurm_executor.hpp"
#include "spec/experiment.hpp"

namespace tune::cli {

// Nothing if `exp` lists no slurm host. Else makes the Slurm executor in `out`, asks Slurm once
// whether it takes such jobs (throws Fatal with Slurm's message if not), and returns the pool
// host its trials are placed on.
std::optional<control::ResourcePool::Host> start_slurm(const spec::Experiment& exp,
                                                       const std::filesystem::path& dir,
                                                       const exec::LocalOptions& lo,
                                                       std::optional<exec::SlurmExecutor>& out);

}  // namespace tune::cli
