#include "exec/io_thread.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "util/process.hpp"

namespace tune::exec {

IoThread::IoThread(double period_s, Task tick, std::function<int()> wake_fd)
    : period_s_(period_s),
      tick_(std::move(tick)),
      wake_fd_(std::move(wake_fd)),
      event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

IoThread::~IoThread() {
  stop();
  if (event_fd_ >= 0) ::close(event_fd_);
}

void IoThread::stop() {
  std::deque<Task> dropped;  // (destroyed outside the lock)
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(tasks_);
  }
  poke();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void IoThread::poke() {
  uint64_t one = 1;
  (void)!::write(event_fd_, &one, sizeof one);
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
  poke();
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
  poke();
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
  auto last_tick = clock::now();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    auto due = std::min(next_tick, soon_);
    bool tick = clock::now() >= due;  // first when due: tasks never starve the tick
    if (!tick && tasks_.empty()) {
      lock.unlock();
      wait(due, last_tick);
      lock.lock();
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
      next_tick = last_tick = clock::now();
      next_tick += period;
    }
    task = nullptr;  // destroyed outside the lock, on this thread
    lock.lock();
  }
}

void IoThread::wait(std::chrono::steady_clock::time_point due,
                    std::chrono::steady_clock::time_point last_tick) {
  using clock = std::chrono::steady_clock;
  auto now = clock::now();
  int fd = wake_fd_ ? wake_fd_() : -1;
  // The wake descriptor only kMinGap after the last tick (input the tick left unread, or a
  // descriptor at its end, must not spin the thread): until then, a wait that short.
  auto fd_from = last_tick + std::chrono::duration_cast<clock::duration>(
                                 std::chrono::duration<double>(kMinGap));
  bool with_fd = fd >= 0 && now >= fd_from;
  auto until = fd >= 0 && !with_fd ? std::min(due, fd_from) : due;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
  if (event_fd_ < 0) ms = std::min<int64_t>(ms, 1);  // (no eventfd: posts are looked for)
  pollfd fds[2] = {{event_fd_, POLLIN, 0}, {fd, POLLIN, 0}};
  int n = ::poll(fds, with_fd ? 2 : 1, static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30)));
  if (n <= 0) return;
  if (fds[0].revents & POLLIN) {
    uint64_t count;
    (void)!::read(event_fd_, &count, sizeof count);
  }
  if (with_fd && fds[1].revents) {
    std::lock_guard lock(mutex_);
    soon_ = std::min(soon_, clock::now());  // a tick now
  }
}

}  // namespace tune::exec
