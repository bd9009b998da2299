// A trial for the state-at-scale benchmark: prints N results (JSON lines) and exits. Started
// 10,000 times, so it is a few instructions rather than a Python interpreter.
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 100;
  for (int i = 1; i <= n; ++i)
    std::printf("{\"loss\": %.6f, \"accuracy\": %.6f, \"epoch\": %d}\n", 1.0 / i, 1.0 - 1.0 / i, i);
  return 0;
}
