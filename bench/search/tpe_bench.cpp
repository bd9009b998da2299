// Native TPE vs random search on Branin (2-d) and Hartmann-6 (6-d), and TPE's suggestion latency
// on a given history. Driven by bench/search/search_bench.py, which runs Optuna beside it.
//
//   tpe_bench regret SEEDS TRIALS        one JSON line per (function, algorithm, seed):
//                                        {"fn", "alg", "seed", "regret": [after 1..TRIALS]}
//   tpe_bench latency HISTORY.json REPS  history: [{"config": {...}, "value": v}, ...] on the
//                                        Branin space; prints {"n", "ms_per_suggest",
//                                        "cpu_ms_per_suggest"} (wall and process CPU time)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>

#include "search/space.hpp"
#include "search/tpe.hpp"

using namespace tune::search;

namespace {
constexpr double kBraninMin = 0.397887357729738;
constexpr double kHartmann6Min = -3.32236801141551;

double branin(const json& c) {
  double x1 = c["x1"], x2 = c["x2"];
  double b = 5.1 / (4 * M_PI * M_PI), cc = 5 / M_PI, t = 1 / (8 * M_PI);
  double u = x2 - b * x1 * x1 + cc * x1 - 6;
  return u * u + 10 * (1 - t) * std::cos(x1) + 10;
}

double hartmann6(const json& c) {
  static constexpr double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  static constexpr double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                     {0.05, 10, 17, 0.1, 8, 14},
                                     {3, 3.5, 1.7, 10, 17, 8},
                                     {17, 8, 0.05, 10, 0.1, 14}};
  static constexpr double P[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                     {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                     {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                     {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double e = 0;
    for (int j = 0; j < 6; ++j) {
      double x = c["x" + std::to_string(j + 1)];
      e += A[i][j] * (x - P[i][j]) * (x - P[i][j]);
    }
    sum += alpha[i] * std::exp(-e);
  }
  return -sum;
}

Space box(const std::vector<std::pair<double, double>>& ranges) {
  Space s;
  for (size_t i = 0; i < ranges.size(); ++i)
    s.params.push_back({{"x" + std::to_string(i + 1)},
                        {Domain::Kind::kUniform, {ranges[i].first, ranges[i].second}}});
  return s;
}

Space branin_space() {
  return box({{-5, 10}, {0, 15}});
}

// Best-so-far regret after each of `trials` sequential trials.
template <typename Next>
std::vector<double> regrets(Next next, double (*f)(const json&), double fmin, int trials) {
  std::vector<Observation> done;
  std::vector<double> out;
  double best = INFINITY;
  for (int i = 0; i < trials; ++i) {
    json c = next(done, i);
    double v = f(c);
    done.push_back({c, v});
    best = std::min(best, v);
    out.push_back(best - fmin);
  }
  return out;
}

int regret_main(int seeds, int trials) {
  struct Fn {
    const char* name;
    Space space;
    double (*f)(const json&);
    double fmin;
  };
  std::vector<Fn> fns = {{"branin", branin_space(), branin, kBraninMin},
                         {"hartmann6", box(std::vector<std::pair<double, double>>(6, {0, 1})),
                          hartmann6, kHartmann6Min}};
  for (const auto& fn : fns)
    for (int seed = 0; seed < seeds; ++seed) {
      auto tpe = Tpe::create(fn.space, {}, static_cast<uint64_t>(seed)).value();
      auto r_tpe =
          regrets([&](auto& done, int) { return tpe.suggest(done, {}); }, fn.f, fn.fmin, trials);
      TpeOptions normalised;
      normalised.bandwidth_weighted = false;
      auto tpe_n = Tpe::create(fn.space, normalised, static_cast<uint64_t>(seed)).value();
      auto r_tpe_n =
          regrets([&](auto& done, int) { return tpe_n.suggest(done, {}); }, fn.f, fn.fmin, trials);
      auto r_rand = regrets(
          [&](auto&, int i) { return generate(fn.space, static_cast<uint64_t>(seed), i).config; },
          fn.f, fn.fmin, trials);
      for (auto [alg, r] : {std::pair{"tpe", &r_tpe}, std::pair{"tpe normalised", &r_tpe_n},
                            std::pair{"random", &r_rand}})
        std::cout << json{{"fn", fn.name}, {"alg", alg}, {"seed", seed}, {"regret", *r}}.dump()
                  << "\n";
    }
  return 0;
}

int latency_main(const char* path, int reps) {
  std::ifstream in(path);
  json history = json::parse(in);
  std::vector<Observation> done;
  for (const auto& h : history) done.push_back({h["config"], h["value"].get<double>()});
  auto tpe = Tpe::create(branin_space(), {}, 0).value();
  (void)tpe.suggest(done, {});  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  std::clock_t c0 = std::clock();
  for (int i = 0; i < reps; ++i) (void)tpe.suggest(done, {});
  double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << json{{"n", done.size()},
                    {"ms_per_suggest", 1e3 * s / reps},
                    {"cpu_ms_per_suggest", 1e3 * cpu / reps}}
                   .dump()
            << "\n";
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "regret" && argc == 4) return regret_main(std::stoi(argv[2]), std::stoi(argv[3]));
  if (mode == "latency" && argc == 4) return latency_main(argv[2], std::stoi(argv[3]));
  std::fprintf(stderr, "usage: tpe_bench regret SEEDS TRIALS | latency HISTORY.json REPS\n");
  return 2;
}
