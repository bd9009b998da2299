#include "search/parzen.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tune::search::parzen {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log(sqrt(2 pi))

// log Phi(x): direct while Phi is representable with full precision, else the asymptotic series
// Phi(x) ~ phi(x) / -x * (1 - 1/x^2 + 3/x^4 - 15/x^6) (relative error < 1e-7 below -30).
double log_ndtr(double x) {
  if (x > -30) return std::log(0.5 * std::erfc(-x / kSqrt2));
  double r = 1 / (x * x);
  return -0.5 * x * x - std::log(-x) - kLogSqrt2Pi + std::log1p(r * (-1 + r * (3 - 15 * r)));
}

// log(exp(a) - exp(b)) for a >= b.
double log_diff_exp(double a, double b) {
  if (b == -kInf) return a;
  if (b >= a) return -kInf;
  return a + std::log1p(-std::exp(b - a));
}

// log(sum exp(v_i)) without overflow; -inf for an empty or all -inf input. Terms below
// top - 40 (each < 4e-18 of the largest) are skipped: exp() of them is slow (underflow path)
// and they do not change the sum of up to 1000 terms beyond the last few bits.
double log_sum_exp(std::span<const double> v) {
  double top = -kInf;
  for (double x : v) top = std::max(top, x);
  if (top == -kInf) return -kInf;
  double s = 0;
  for (double x : v)
    if (x > top - 40) s += std::exp(x - top);
  return top + std::log(s);
}

// Index i with cum[i-1] <= u * total < cum[i], for weights w (non-negative, total > 0).
size_t pick(std::span<const double> w, double u) {
  double total = std::accumulate(w.begin(), w.end(), 0.0);
  double target = u * total, cum = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    cum += w[i];
    if (target < cum) return i;
  }
  return w.size() - 1;  // rounding left target at the very end
}

// Bandwidths by the neighbour rule, for mus (last one the prior), before clipping.
std::vector<double> neighbour_sigmas(std::span<const double> mus, const Support& s,
                                     bool endpoints) {
  size_t n = mus.size();
  std::vector<std::pair<double, size_t>> by_mu(n);  // (mu, index): ties in index order
  for (size_t i = 0; i < n; ++i) by_mu[i] = {mus[i], i};
  std::sort(by_mu.begin(), by_mu.end());
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = by_mu[k].second;
  std::vector<double> sigmas(n, s.range);
  for (size_t k = 0; k < n; ++k) {
    double left = -kInf, right = -kInf;
    if (k > 0)
      left = mus[order[k]] - mus[order[k - 1]];
    else if ((endpoints || n == 1) && s.bounded)
      left = mus[order[k]] - s.low;
    if (k + 1 < n)
      right = mus[order[k + 1]] - mus[order[k]];
    else if ((endpoints || n == 1) && s.bounded)
      right = s.high - mus[order[k]];
    double sigma = std::max(left, right);
    sigmas[order[k]] = sigma == -kInf ? s.range : sigma;
  }
  return sigmas;
}
}  // namespace

double norm_cdf(double z) {
  return 0.5 * std::erfc(-z / kSqrt2);
}

double norm_ppf(double p) {
  if (p <= 0) return -kInf;
  if (p >= 1) return kInf;
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  auto tail = [&](double q) {
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  };
  double x;
  if (p < 0.02425) {
    x = tail(std::sqrt(-2 * std::log(p)));
  } else if (p > 1 - 0.02425) {
    x = -tail(std::sqrt(-2 * std::log1p(-p)));
  } else {
    double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  // One Halley step on Phi(x) - p (in the upper tail, on the complement for precision).
  double e = p > 0.5 ? (1 - p) - 0.5 * std::erfc(x / kSqrt2) : norm_cdf(x) - p;
  double u = e * std::exp(kLogSqrt2Pi + 0.5 * x * x);
  return x - u / (1 + 0.5 * x * u);
}

double log_gauss_mass(double a, double b) {
  if (!(a < b)) return -kInf;
  if (b <= 0) return log_diff_exp(log_ndtr(b), log_ndtr(a));
  if (a >= 0) return log_diff_exp(log_ndtr(-a), log_ndtr(-b));
  // Straddling 0: erf is accurate near 0, where erfc would cancel.
  return std::log(0.5 * (std::erf(b / kSqrt2) - std::erf(a / kSqrt2)));
}

double truncnorm_at(double a, double b, double u) {
  if (!(a < b)) return a;                           // an empty interval: its only point
  if (a >= 0) return -truncnorm_at(-b, -a, 1 - u);  // sample the lower tail, mirrored
  double pa = norm_cdf(a), pb = norm_cdf(b);
  double x;
  if (pb - pa > 1e-300) {
    x = norm_ppf(pa + u * (pb - pa));
  } else {
    // Deep in the left tail the density is ~ exp(-|b| (b - x)) on [a, b]: an exponential.
    double k = -b;
    x = b + std::log1p(-u * -std::expm1(-k * (b - a))) / k;
  }
  return std::clamp(x, a, b);
}

size_t n_below(size_t n, double gamma, size_t cap) {
  auto g = static_cast<size_t>(std::ceil(gamma * static_cast<double>(n)));
  return std::min({g, cap, n});
}

std::vector<double> default_weights(size_t n) {
  std::vector<double> w(n, 1.0);
  if (n <= 25) return w;
  size_t ramp = n - 25;  // linspace(1/n, 1, ramp) for the oldest
  double lo = 1.0 / static_cast<double>(n);
  for (size_t i = 0; i < ramp; ++i)
    w[i] = ramp == 1 ? lo : lo + (1 - lo) * static_cast<double>(i) / static_cast<double>(ramp - 1);
  return w;
}

Mixture fit(std::span<const double> obs, std::span<const double> w, const Support& support,
            const FitOptions& options) {
  Mixture m;
  m.support = support;
  m.mus.assign(obs.begin(), obs.end());
  m.mus.push_back(support.prior_mu);
  m.sigmas = neighbour_sigmas(m.mus, support, options.consider_endpoints);
  double min_sigma = options.consider_magic_clip
                         ? support.range / std::min(100.0, 1.0 + static_cast<double>(m.mus.size()))
                         : 1e-12;
  for (double& s : m.sigmas) s = std::clamp(s, min_sigma, support.range);
  m.sigmas.back() = support.range;
  m.weights.assign(w.begin(), w.end());
  m.weights.push_back(options.prior_weight);
  double total = std::accumulate(m.weights.begin(), m.weights.end(), 0.0);
  for (double& x : m.weights) x /= total;
  m.log_norm.resize(m.mus.size(), 0.0);
  if (support.bounded)
    for (size_t i = 0; i < m.mus.size(); ++i)
      m.log_norm[i] = log_gauss_mass((support.low - m.mus[i]) / m.sigmas[i],
                                     (support.high - m.mus[i]) / m.sigmas[i]);
  m.log_coef.resize(m.mus.size());
  for (size_t i = 0; i < m.mus.size(); ++i)
    m.log_coef[i] = std::log(m.weights[i]) -
                    (options.bandwidth_weighted ? 0 : std::log(m.sigmas[i])) - kLogSqrt2Pi -
                    m.log_norm[i];
  return m;
}

double log_pdf(const Mixture& m, double x) {
  if (m.support.bounded && (x < m.support.low || x > m.support.high)) return -kInf;
  thread_local std::vector<double> terms;
  terms.resize(m.mus.size());
  for (size_t i = 0; i < m.mus.size(); ++i) {
    double z = (x - m.mus[i]) / m.sigmas[i];
    terms[i] = m.log_coef[i] - 0.5 * z * z;
  }
  return log_sum_exp(terms);
}

double log_mass(const Mixture& m, double lo, double hi) {
  if (m.support.bounded) {
    lo = std::max(lo, m.support.low);
    hi = std::min(hi, m.support.high);
  }
  std::vector<double> terms(m.mus.size());
  for (size_t i = 0; i < m.mus.size(); ++i)
    terms[i] = std::log(m.weights[i]) +
               log_gauss_mass((lo - m.mus[i]) / m.sigmas[i], (hi - m.mus[i]) / m.sigmas[i]) -
               m.log_norm[i];
  return log_sum_exp(terms);
}

double sample(const Mixture& m, Rng& rng) {
  size_t i = pick(m.weights, rng.unit());
  double u = rng.unit();
  if (!m.support.bounded) return m.mus[i] + m.sigmas[i] * norm_ppf(std::max(u, 0x1.0p-60));
  double a = (m.support.low - m.mus[i]) / m.sigmas[i];
  double b = (m.support.high - m.mus[i]) / m.sigmas[i];
  return std::clamp(m.mus[i] + m.sigmas[i] * truncnorm_at(a, b, u), m.support.low, m.support.high);
}

std::vector<double> fit_categorical(std::span<const size_t> obs, std::span<const double> w,
                                    size_t k, double prior_weight) {
  size_t n = obs.size();
  double fill = prior_weight / static_cast<double>(n + 1);
  std::vector<double> probs(k, 0.0);
  double total = prior_weight;
  for (size_t i = 0; i < n; ++i) {
    double row = fill * static_cast<double>(k) + 1;  // the row's sum before normalising
    for (size_t c = 0; c < k; ++c) probs[c] += w[i] * fill / row;
    probs[obs[i]] += w[i] / row;
    total += w[i];
  }
  for (size_t c = 0; c < k; ++c)
    probs[c] = (probs[c] + prior_weight / static_cast<double>(k)) / total;
  return probs;
}

size_t sample_categorical(std::span<const double> probs, Rng& rng) {
  return pick(probs, rng.unit());
}

}  // namespace tune::search::parzen
