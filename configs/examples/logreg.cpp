// The quickstart's trial: L2-regularised logistic regression trained with minibatch SGD on a
// synthetic, deterministic two-class dataset. Reports train/validation loss and accuracy every
// epoch and checkpoints its weights (function mode, with the C++ helper tune/trial.hpp).
//
//   tune-example-logreg [--lr=X] [--l2=X] [--batch-size=N] [--epochs=N]
// Flags override the config from TUNE_CONFIG; outside tune it simply trains with defaults.
#include <tune/trial.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kDim = 32;
constexpr int kTrain = 8000;
constexpr int kVal = 2000;

struct Data {
  std::vector<double> x;  // row-major, n x kDim
  std::vector<int> y;
};

// Same data in every trial and on every machine: fixed seed, mt19937_64, Box-Muller.
void make_data(Data& train, Data& val) {
  std::mt19937_64 rng(20261121);
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  auto normal = [&] {
    double u1 = std::max(unit(), 1e-300), u2 = unit();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  };
  std::vector<double> w(kDim);
  for (auto& v : w) v = normal();
  auto fill = [&](Data& d, int n) {
    d.x.resize(static_cast<size_t>(n) * kDim);
    d.y.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      double z = 0;
      for (int j = 0; j < kDim; ++j) {
        double v = normal();
        d.x[static_cast<size_t>(i) * kDim + j] = v;
        z += v * w[static_cast<size_t>(j)];
      }
      z += 2.0 * normal();  // label noise: the problem is not separable
      d.y[static_cast<size_t>(i)] = z > 0;
    }
  };
  fill(train, kTrain);
  fill(val, kVal);
}

double sigmoid(double z) {
  return 1 / (1 + std::exp(-z));
}

void evaluate(const Data& d, const std::vector<double>& w, double& loss, double& acc) {
  loss = 0;
  int correct = 0;
  size_t n = d.y.size();
  for (size_t i = 0; i < n; ++i) {
    double z = w[kDim];
    for (int j = 0; j < kDim; ++j) z += w[static_cast<size_t>(j)] * d.x[i * kDim + j];
    double p = std::clamp(sigmoid(z), 1e-12, 1 - 1e-12);
    loss -= d.y[i] ? std::log(p) : std::log(1 - p);
    correct += (p > 0.5) == (d.y[i] == 1);
  }
  loss /= static_cast<double>(n);
  acc = static_cast<double>(correct) / static_cast<double>(n);
}

std::string flag(int argc, char** argv, const std::string& name) {
  std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0)
      return std::string(argv[i]).substr(prefix.size());
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  auto cfg = tune_trial::config();
  auto param = [&](const char* name, double fallback) {
    std::string f = flag(argc, argv, name);
    return f.empty() ? cfg[name].number(fallback) : std::stod(f);
  };
  double lr = param("lr", 0.1);
  double l2 = param("l2", 1e-4);
  int batch = static_cast<int>(param("batch-size", cfg["batch_size"].number(32)));
  int epochs = static_cast<int>(param("epochs", 30));
  if (batch < 1 || lr <= 0 || epochs < 1) {
    std::cerr << "logreg: invalid hyperparameters\n";
    return 2;
  }

  Data train, val;
  make_data(train, val);
  std::vector<double> w(kDim + 1, 0.0);
  int start = 0;
  if (auto ckpt = tune_trial::get_checkpoint()) {
    std::ifstream in(*ckpt + "/weights.txt");
    in >> start;
    for (auto& v : w) in >> v;
    if (!in) {
      std::cerr << "logreg: cannot read checkpoint " << *ckpt << "\n";
      return 1;
    }
    std::cerr << "logreg: resumed from " << *ckpt << " at epoch " << start << "\n";
  }

  std::mt19937_64 order_rng(static_cast<uint64_t>(start) + 7);
  std::vector<int> order(kTrain);
  for (int i = 0; i < kTrain; ++i) order[static_cast<size_t>(i)] = i;
  std::vector<double> grad(kDim + 1);
  for (int epoch = start; epoch < epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), order_rng);
    double step = lr / std::sqrt(1.0 + epoch);  // decaying step size
    for (int b = 0; b < kTrain; b += batch) {
      std::fill(grad.begin(), grad.end(), 0.0);
      int end = std::min(kTrain, b + batch);
      for (int k = b; k < end; ++k) {
        size_t i = static_cast<size_t>(order[static_cast<size_t>(k)]);
        double z = w[kDim];
        for (int j = 0; j < kDim; ++j) z += w[static_cast<size_t>(j)] * train.x[i * kDim + j];
        double err = sigmoid(z) - train.y[i];
        for (int j = 0; j < kDim; ++j) grad[static_cast<size_t>(j)] += err * train.x[i * kDim + j];
        grad[kDim] += err;
      }
      double scale = step / (end - b);
      for (int j = 0; j < kDim; ++j)
        w[static_cast<size_t>(j)] -=
            scale * grad[static_cast<size_t>(j)] + step * l2 * w[static_cast<size_t>(j)];
      w[kDim] -= scale * grad[kDim];
    }
    double train_loss, train_acc, val_loss, val_acc;
    evaluate(train, w, train_loss, train_acc);
    evaluate(val, w, val_loss, val_acc);

    std::string dir = tune_trial::make_checkpoint_dir();
    {
      std::ofstream out(dir + "/weights.txt");
      out.precision(17);
      out << epoch + 1 << "\n";
      for (double v : w) out << v << "\n";
    }
    tune_trial::report({{"epoch", epoch + 1},
                        {"loss", train_loss},
                        {"accuracy", train_acc},
                        {"val_loss", val_loss},
                        {"val_accuracy", val_acc}},
                       dir);
  }
  return 0;
}
