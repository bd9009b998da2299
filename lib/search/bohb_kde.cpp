#include "search/bohb_kde.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "search/parzen.hpp"

namespace tune::search::kde {

namespace {
constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log(sqrt(2 pi))

// Population standard deviation (numpy's default, ddof 0) of column j.
double column_std(const std::vector<std::vector<double>>& rows, size_t j) {
  double mean = 0;
  for (const auto& r : rows) mean += r[j];
  mean /= static_cast<double>(rows.size());
  double ss = 0;
  for (const auto& r : rows) ss += (r[j] - mean) * (r[j] - mean);
  return std::sqrt(ss / static_cast<double>(rows.size()));
}
}  // namespace

Kde fit(std::vector<std::vector<double>> rows, std::span<const Var> vars, double min_bandwidth) {
  Kde k;
  double n = static_cast<double>(rows.size());
  double scale = 1.06 * std::pow(n, -1.0 / (4.0 + static_cast<double>(vars.size())));
  k.bw.resize(vars.size());
  for (size_t j = 0; j < vars.size(); ++j) {
    double bw = std::max(scale * column_std(rows, j), min_bandwidth);
    if (vars[j].levels > 1) {
      double uniform =
          static_cast<double>(vars[j].levels - 1) / static_cast<double>(vars[j].levels);
      bw = std::min(bw, std::max(uniform, min_bandwidth));
    }
    k.bw[j] = bw;
  }
  k.rows = std::move(rows);
  return k;
}

double log_pdf(const Kde& k, std::span<const Var> vars, std::span<const double> x) {
  // Per dimension: the log kernel terms that do not depend on the row.
  thread_local std::vector<double> terms;
  terms.clear();
  for (const auto& row : k.rows) {
    double s = 0;
    for (size_t j = 0; j < vars.size() && s > -std::numeric_limits<double>::infinity(); ++j) {
      double h = k.bw[j];
      if (vars[j].levels == 0) {
        double z = (x[j] - row[j]) / h;
        s += -0.5 * z * z - std::log(h) - kLogSqrt2Pi;
      } else if (vars[j].levels == 1) {
        continue;  // one choice: the kernel is 1
      } else {
        bool same = std::lround(x[j]) == std::lround(row[j]);
        double p = same ? 1 - h : h / static_cast<double>(vars[j].levels - 1);
        s += p > 0 ? std::log(p) : -std::numeric_limits<double>::infinity();
      }
    }
    terms.push_back(s);
  }
  double top = -std::numeric_limits<double>::infinity();
  for (double t : terms) top = std::max(top, t);
  if (top == -std::numeric_limits<double>::infinity()) return top;
  double sum = 0;
  for (double t : terms) sum += std::exp(t - top);
  return top + std::log(sum / static_cast<double>(terms.size()));
}

std::vector<double> sample(const Kde& k, std::span<const Var> vars, double bandwidth_factor,
                           Rng& rng) {
  const auto& row = k.rows[rng.below(k.rows.size())];
  std::vector<double> x(vars.size());
  for (size_t j = 0; j < vars.size(); ++j) {
    double m = row[j], h = k.bw[j];
    if (vars[j].levels == 0) {
      double sigma = bandwidth_factor * h;
      double u = rng.unit();
      if (vars[j].bounded) {
        double z = parzen::truncnorm_at(-m / sigma, (1 - m) / sigma, u);
        x[j] = std::clamp(m + sigma * z, 0.0, 1.0);
      } else {
        x[j] = m + sigma * parzen::norm_ppf(std::max(u, 0x1.0p-60));
      }
    } else {
      double u = rng.unit();
      uint64_t pick = rng.below(std::max<size_t>(vars[j].levels, 1));
      x[j] = u < 1 - h ? m : static_cast<double>(pick);
    }
  }
  return x;
}

}  // namespace tune::search::kde
