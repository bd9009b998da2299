// The scheduler's share of the state writes of a median_stopping run (run on demand, never by
// ctest; figures in docs/BENCHMARKS.md): TRIALS trials x RESULTS results, 2 running at a time, a
// state write every EVERY results. `log`: as the driver does now — the new results go to the
// scheduler's log (log_tail) and the header holds the rest; `whole`: the log is never written,
// so every write serialises every trial's whole history, as before the log existed. Prints the
// thread CPU time of all writes, of the last, and the bytes produced.
//   tune_bench_median_state log|whole [TRIALS] [RESULTS] [EVERY]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sched/scheduler.hpp"
#include "state/seal.hpp"
#include "util/json_ext.hpp"

using namespace tune;

namespace {

double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s log|whole [TRIALS] [RESULTS] [EVERY]\n", argv[0]);
    return 2;
  }
  const bool use_log = std::string(argv[1]) == "log";
  const int trials = argc > 2 ? std::atoi(argv[2]) : 10000;
  const int results = argc > 3 ? std::atoi(argv[3]) : 100;
  const long every = argc > 4 ? std::atol(argv[4]) : 2000;
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kMedianStopping;
  s.grace_period = 5;
  s.min_samples_required = 3;
  auto m = sched::make_scheduler(s, 0);
  double spent = 0, last = 0;
  size_t writes = 0, bytes = 0;
  long n = 0;
  char a[16], b[16];
  for (int t = 0; t < trials; t += 2) {
    std::snprintf(a, sizeof a, "%05d", t);
    std::snprintf(b, sizeof b, "%05d", t + 1);
    for (int i = 1; i <= results; ++i) {
      double score = 1.0 - 1.0 / (i + 1);  // the same curve for all: nobody stops
      (void)m->on_result({a, static_cast<double>(i), score});
      (void)m->on_result({b, static_cast<double>(i), score});
      if ((n += 2) % every != 0) continue;
      double t0 = cpu_now();
      std::string appended;
      if (use_log) {
        appended = m->log_tail();
        m->log_written();
      }
      std::string head = state::seal_header(util::dump_json_ext(m->save()), ",");
      last = cpu_now() - t0;
      spent += last;
      ++writes;
      bytes += appended.size() + head.size();
    }
  }
  std::printf(
      "{\"mode\": \"%s\", \"writes\": %zu, \"cpu_s\": %.3f, \"last_ms\": %.3f, \"mb\": %.1f}\n",
      use_log ? "log" : "whole", writes, spent, last * 1e3, static_cast<double>(bytes) / 1e6);
}
