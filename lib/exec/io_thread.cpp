#include "exec/io_thread.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "util/process.hpp"

namespace tune::exec {

IoThread::IoThread(double period_s, Task tick) : period_s_(period_s), tick_(std::move(tick)) {}

IoThread::~IoThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    tasks_.clear();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void IoThread::start() {
  if (thread_.joinable()) return;
  // Signals go to the driver's main thread (its signalfd), never to this one: it starts with
  // every signal blocked (a thread inherits its creator's mask).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { loop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void IoThread::post(Task task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void IoThread::tick_within(double s) {
  auto at = std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(std::max(0.0, s)));
  {
    std::lock_guard lock(mutex_);
    if (at >= soon_) return;
    soon_ = at;
  }
  wake_.notify_one();
}

size_t IoThread::backlog() const {
  std::lock_guard lock(mutex_);
  return tasks_.size();
}

void IoThread::loop() {
  using clock = std::chrono::steady_clock;
  auto period =
      std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(period_s_));
  util::tie_helpers_to_this_thread();  // its rsyncs and ssh masters die with the driver
  auto next_tick = clock::now() + period;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    auto due = std::min(next_tick, soon_);
    bool tick = clock::now() >= due;  // first when due: tasks never starve the tick
    if (!tick && tasks_.empty()) {
      wake_.wait_until(lock, due, [&] { return stopping_ || !tasks_.empty() || soon_ < due; });
      continue;
    }
    if (tick) soon_ = clock::time_point::max();  // a tick_within() from the tick itself stays
    Task task;
    if (!tick) {
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    lock.unlock();
    if (task) {
      task();
    } else {
      if (tick_) tick_();
      next_tick = clock::now() + period;
    }
    task = nullptr;  // destroyed outside the lock, on this thread
    lock.lock();
  }
}

}  // namespace tune::exec
