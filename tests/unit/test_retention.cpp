// Keep-N-best retention as a pure function.
#include <catch2/catch.hpp>
#include <cmath>

#include "checkpoint/retention.hpp"

using namespace tune;

namespace {
std::vector<trial::Checkpoint> ckpts(std::vector<double> losses) {
  std::vector<trial::Checkpoint> out;
  for (size_t i = 0; i < losses.size(); ++i) {
    trial::Checkpoint c;
    c.seq = static_cast<int64_t>(i + 1);
    c.iteration = c.seq;
    if (!std::isinf(losses[i])) c.metrics["loss"] = losses[i];
    out.push_back(c);
  }
  return out;
}
checkpoint::Policy by_loss(int n, spec::Order o = spec::Order::kMin) {
  return {n, std::string("loss"), o};
}
}  // namespace

TEST_CASE("Ray Train's example: losses 2,4,1,3, keep 2 by min", "[retention]") {
  auto c = ckpts({2, 4, 1, 3});
  CHECK(checkpoint::select_for_deletion(c, by_loss(2), false) == std::vector<int64_t>{2, 4});
  // while the trial can still run, the latest (4) is kept too
  CHECK(checkpoint::select_for_deletion(c, by_loss(2), true) == std::vector<int64_t>{2});
  auto ranked = checkpoint::rank(c, std::string("loss"), spec::Order::kMin);
  CHECK(ranked.front()->seq == 3);
}

TEST_CASE("default policy keeps the most recent, no num_to_keep keeps all", "[retention]") {
  auto c = ckpts({5, 1, 3});
  CHECK(checkpoint::select_for_deletion(c, {1, std::nullopt, spec::Order::kMax}, false) ==
        std::vector<int64_t>{1, 2});
  CHECK(checkpoint::select_for_deletion(c, {std::nullopt, std::string("loss"), spec::Order::kMin},
                                        false)
            .empty());
}

TEST_CASE("ties keep the older, missing and NaN scores rank worst with a warning", "[retention]") {
  auto c = ckpts({1, 1, 1});
  CHECK(checkpoint::select_for_deletion(c, by_loss(1), false) == std::vector<int64_t>{2, 3});
  auto m = ckpts({INFINITY, 5, NAN, 7});  // INFINITY here = attribute absent
  std::vector<std::string> warnings;
  CHECK(checkpoint::select_for_deletion(m, by_loss(2, spec::Order::kMax), false, &warnings) ==
        std::vector<int64_t>{1, 3});
  CHECK(warnings.size() == 2);
}

TEST_CASE("NaN and Infinity scores (a diverged metric) rank last in either order", "[retention]") {
  for (auto order : {spec::Order::kMin, spec::Order::kMax}) {
    std::vector<trial::Checkpoint> c(5);
    double losses[] = {0.5, NAN, 0.3, INFINITY, -INFINITY};
    for (size_t i = 0; i < c.size(); ++i) {
      c[i].seq = static_cast<int64_t>(i + 1);
      c[i].iteration = c[i].seq;
      c[i].metrics["loss"] = losses[i];
    }
    auto ranked = checkpoint::rank(c, std::string("loss"), order);
    std::vector<int64_t> seqs;
    for (const auto* r : ranked) seqs.push_back(r->seq);
    CHECK(seqs == (order == spec::Order::kMin ? std::vector<int64_t>{3, 1, 2, 4, 5}
                                              : std::vector<int64_t>{1, 3, 2, 4, 5}));
    CHECK(checkpoint::select_for_deletion(c, by_loss(2, order), false) ==
          std::vector<int64_t>{2, 4, 5});
  }
}
