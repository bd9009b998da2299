// Scheduler overhead (run on demand, never by ctest): the time a scheduler takes per result when
// TRIALS trials of RESULTS results each run CONCURRENT at a time — the decision alone, without
// processes, so that it can be measured at the scale of a large experiment (10,000 × 100).
// Times are the thread's CPU time. Each trial's curve is synthetic and seeded: score(t) = a − b/(t
// + 1) + small noise. Pauses (hyperband) are carried out as the controller does: a paused trial
// waits until a verdict lets it go on or stops it. Prints one JSON object per scheduler.
//   tune_bench_sched_overhead [TRIALS] [RESULTS] [CONCURRENT] [SEED]
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sched/scheduler.hpp"
#include "search/rng.hpp"

using namespace tune;

namespace {

// This thread's CPU time: on a busy machine, wall time would charge a scheduler for the time
// other processes ran.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Curve {
  double a, b;
};

struct Outcome {
  double seconds = 0;      // inside the scheduler
  uint64_t decisions = 0;  // on_result calls
  uint64_t stopped = 0, paused = 0;
  double worst_us = 0;  // the slowest single on_result
};

// One simulated run: trials start in order when a slot is free, running trials report in turn.
Outcome simulate(const spec::SchedulerSpec& s, uint64_t trials, int results, size_t concurrent,
                 uint64_t seed) {
  auto sched = sched::make_scheduler(s, seed);
  search::Rng rng(seed);
  std::vector<Curve> curve(trials);
  for (auto& c : curve) c = {rng.unit(), 0.5 * rng.unit()};
  std::vector<int> next_t(trials, 1);
  std::vector<std::string> id(trials);
  for (uint64_t i = 0; i < trials; ++i) id[i] = std::to_string(i);
  std::deque<uint64_t> running, ready;  // ready: paused trials allowed to go on
  std::set<uint64_t> parked;
  uint64_t added = 0;
  Outcome out;
  auto timed = [&](auto&& f) {
    double t0 = cpu_now();
    f();
    double d = cpu_now() - t0;
    out.seconds += d;
    return d;
  };
  auto complete = [&](uint64_t i, double t, double score) {
    timed([&] { sched->on_complete(id[i], sched::Observation{id[i], t, score}); });
  };
  auto verdicts = [&] {
    std::vector<sched::Verdict> vs;
    timed([&] { vs = sched->take_verdicts(); });
    for (const auto& v : vs) {
      uint64_t i = std::stoull(v.trial);
      if (!parked.erase(i)) continue;
      if (v.action == sched::Action::kStop) {
        ++out.stopped;
        complete(i, next_t[i] - 1, std::nan(""));
      } else {
        ready.push_back(i);
      }
    }
  };
  for (;;) {
    while (running.size() < concurrent && (!ready.empty() || added < trials)) {
      if (!ready.empty()) {
        running.push_back(ready.front());
        ready.pop_front();
      } else {
        timed([&] { sched->on_trial_add(id[added], added); });
        running.push_back(added++);
        if (added == trials) {
          timed([&] { sched->on_no_more_trials(); });
          verdicts();
        }
      }
    }
    if (running.empty()) {
      if (parked.empty()) break;
      ready.insert(ready.end(), parked.begin(), parked.end());  // as release_stuck_paused
      parked.clear();
      continue;
    }
    uint64_t i = running.front();
    running.pop_front();
    int t = next_t[i]++;
    double score = curve[i].a - curve[i].b / (t + 1) + 0.01 * rng.unit();
    sched::Decision d;
    double took = timed([&] { d = sched->on_result({id[i], double(t), score}); });
    out.worst_us = std::max(out.worst_us, took * 1e6);
    ++out.decisions;
    if (d.action == sched::Action::kStop || t >= results) {
      out.stopped += d.action == sched::Action::kStop;
      complete(i, t, score);
    } else if (d.action == sched::Action::kPause) {
      ++out.paused;
      parked.insert(i);
    } else {
      running.push_back(i);
    }
    verdicts();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t trials = argc > 1 ? std::stoull(argv[1]) : 10000;
  int results = argc > 2 ? std::stoi(argv[2]) : 100;
  size_t concurrent = argc > 3 ? std::stoul(argv[3]) : 16;
  uint64_t seed = argc > 4 ? std::stoull(argv[4]) : 1;
  struct Case {
    const char* name;
    spec::SchedulerSpec spec;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, spec::SchedulerKind k, double max_t, double rf) {
    spec::SchedulerSpec s;
    s.kind = k;
    s.metric = "score";
    s.mode = spec::Order::kMax;
    s.max_t = max_t;
    s.reduction_factor = rf;
    s.grace_period = 1;
    cases.push_back({name, s});
  };
  add("fifo", spec::SchedulerKind::kFifo, results, 4);
  add("asha", spec::SchedulerKind::kAsha, results, 4);
  add("hyperband", spec::SchedulerKind::kHyperBand, results, 3);
  add("median_stopping", spec::SchedulerKind::kMedianStopping, results, 4);
  for (const auto& c : cases) {
    Outcome o = simulate(c.spec, trials, results, concurrent, seed);
    std::printf(
        "{\"scheduler\": \"%s\", \"trials\": %llu, \"results_per_trial\": %d, \"concurrent\": "
        "%zu, \"decisions\": %llu, \"stopped\": %llu, \"paused\": %llu, \"us_per_decision\": "
        "%.3f, \"worst_us\": %.1f, \"seconds\": %.3f}\n",
        c.name, static_cast<unsigned long long>(trials), results, concurrent,
        static_cast<unsigned long long>(o.decisions), static_cast<unsigned long long>(o.stopped),
        static_cast<unsigned long long>(o.paused),
        o.decisions ? o.seconds * 1e6 / double(o.decisions) : 0.0, o.worst_us, o.seconds);
    std::fflush(stdout);
  }
  return 0;
}
