#include "report/refresher.hpp"

#include <algorithm>
#include <chrono>

#include "report/html.hpp"

namespace tune::report {

Refresher::Refresher(std::filesystem::path exp_dir, double period_s)
    : dir_(std::move(exp_dir)), period_s_(period_s) {
  if (period_s_ > 0) thread_ = std::thread([this] { loop(); });
}

Refresher::~Refresher() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Refresher::poll(double now) {
  if (period_s_ <= 0) return "";
  std::lock_guard lock(mu_);
  if (next_ == 0) next_ = now + period_s_;  // the first report after one period
  if (now >= next_ && !busy_) {
    asked_ = true;
    // A big experiment's report takes seconds to build: at most ~20% of one core goes to it.
    next_ = now + std::max(period_s_, 5 * last_cost_s_);
    wake_.notify_all();
  }
  return std::exchange(error_, "");
}

std::string Refresher::write_now(std::function<void(size_t, size_t)> progress) {
  if (period_s_ <= 0) return "";
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return !busy_ && !asked_; });
  asked_ = true;
  progress_ = std::move(progress);
  wake_.notify_all();
  idle_.wait(lock, [this] { return !busy_ && !asked_; });
  return std::exchange(error_, "");
}

int Refresher::written() const {
  std::lock_guard lock(mu_);
  return written_;
}

void Refresher::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return quit_ || asked_; });
    if (quit_) return;
    asked_ = false;
    busy_ = true;
    auto progress = std::exchange(progress_, {});
    lock.unlock();
    auto t0 = std::chrono::steady_clock::now();
    auto r = write_report(dir_, dir_ / "report.html", progress);
    double cost = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    last_cost_s_ = cost;
    busy_ = false;
    if (r)
      ++written_;
    else
      error_ = "cannot write " + (dir_ / "report.html").string() + ": " + r.error().message;
    idle_.notify_all();
  }
}

}  // namespace tune::report
