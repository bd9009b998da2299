// The scheduler factory, and fifo: every trial runs until it ends by itself.
#include "sched/scheduler.hpp"

#include "sched/asha.hpp"
#include "sched/hyperband.hpp"
#include "sched/median_stopping.hpp"
#include "sched/pbt.hpp"

namespace tune::sched {

namespace {

class Fifo final : public TrialScheduler {
 public:
  void on_trial_add(const std::string&, uint64_t) override {}
  Decision on_result(const Observation&) override { return Decision::go(); }
  void on_complete(const std::string&, const std::optional<Observation>&) override {}
  json save() const override { return nullptr; }
  Result<void> restore(const json&) override { return {}; }
};

}  // namespace

std::unique_ptr<TrialScheduler> make_scheduler(const spec::SchedulerSpec& spec, uint64_t seed) {
  switch (spec.kind) {
    case spec::SchedulerKind::kFifo:
      return std::make_unique<Fifo>();
    case spec::SchedulerKind::kAsha:
      return std::make_unique<Asha>(spec, seed);
    case spec::SchedulerKind::kHyperBand:
      return std::make_unique<HyperBand>(spec);
    case spec::SchedulerKind::kMedianStopping:
      return std::make_unique<MedianStopping>(spec);
    case spec::SchedulerKind::kPbt:
      return std::make_unique<Pbt>(spec, seed);
  }
  return std::make_unique<Fifo>();
}

}  // namespace tune::sched
