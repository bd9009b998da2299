// A trial for the benchmarks, a few instructions rather than a Python interpreter:
//   tune_bench_reporter N                 print N results at once
//   tune_bench_reporter N SLEEP_S         sleep, then print N results (bookkeeping workload)
//   tune_bench_reporter N 0 RATE          print N results at RATE per second (throughput)
//   tune_bench_reporter N 0 0 A B         print N results at once with a curve of the trial's own,
//                                         score = A - B / (i + 1) (scheduler overhead)
#include <time.h>

#include <cstdio>
#include <cstdlib>

static double curve_a = 0, curve_b = 0;
static bool with_curve = false;

static void line(int i) {
  if (with_curve)
    std::printf("{\"score\": %.6f, \"epoch\": %d}\n", curve_a - curve_b / (i + 1), i);
  else
    std::printf("{\"loss\": %.6f, \"accuracy\": %.6f, \"epoch\": %d}\n", 1.0 / i, 1.0 - 1.0 / i, i);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 100;
  double sleep_s = argc > 2 ? std::atof(argv[2]) : 0;
  double rate = argc > 3 ? std::atof(argv[3]) : 0;
  if (argc > 5) {
    with_curve = true;
    curve_a = std::atof(argv[4]);
    curve_b = std::atof(argv[5]);
  }
  if (sleep_s > 0) {
    timespec ts{
        static_cast<time_t>(sleep_s),
        static_cast<long>((sleep_s - static_cast<double>(static_cast<time_t>(sleep_s))) * 1e9)};
    nanosleep(&ts, nullptr);
  }
  if (rate <= 0) {
    for (int i = 1; i <= n; ++i) line(i);
    return 0;
  }
  // In ticks of 10 ms: rate/100 lines each, flushed, on a fixed schedule.
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  int printed = 0;
  for (long tick = 1; printed < n; ++tick) {
    long due = static_cast<long>(rate * tick / 100.0);
    while (printed < due && printed < n) line(++printed);
    std::fflush(stdout);
    timespec next = start;
    long ns = next.tv_nsec + tick * 10'000'000L;
    next.tv_sec += ns / 1'000'000'000L;
    next.tv_nsec = ns % 1'000'000'000L;
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
  }
  return 0;
}
