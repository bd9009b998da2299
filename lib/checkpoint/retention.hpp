// Keep-N-best checkpoint retention.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spec/experiment.hpp"
#include "trial/trial.hpp"

namespace tune::checkpoint {

struct Policy {
  std::optional<int> num_to_keep;              // nullopt = keep all
  std::optional<std::string> score_attribute;  // nullopt = recency
  spec::Order order = spec::Order::kMax;

  [[nodiscard]] static Policy from(const spec::CheckpointConfig& c) {
    return {c.num_to_keep, c.score_attribute, c.score_order};
  }
};

// The checkpoints to delete: all but the N best by the policy's score (a missing, NaN or infinite
// score ranks worst; on a tie the older wins), and never the latest while `trial_can_run`.
// `warnings` receives one line per checkpoint that lacks the score attribute.
[[nodiscard]] std::vector<int64_t> select_for_deletion(
    const std::vector<trial::Checkpoint>& ckpts, const Policy& policy, bool trial_can_run,
    std::vector<std::string>* warnings = nullptr);

// Orders checkpoints best first by `metric`/`order` (missing/NaN/±Infinity last, older first on
// ties).
[[nodiscard]] std::vector<const trial::Checkpoint*> rank(
    const std::vector<trial::Checkpoint>& ckpts, const std::optional<std::string>& metric,
    spec::Order order);

}  // namespace tune::checkpoint
