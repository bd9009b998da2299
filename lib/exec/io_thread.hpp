// A thread that does one host's network work, so that the driver's loop never waits on a link:
// tasks run in the order they were posted, and a tick runs every `period` seconds between them,
// and also as soon as the descriptor `wake_fd` names is readable (the host's connection, on
// which its agent's events arrive), at most once per kMinGap.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>

namespace tune::exec {

class IoThread {
 public:
  using Task = std::function<void()>;

  static constexpr double kMinGap = 0.002;  // s between ticks a readable descriptor asks for

  // `tick` runs on the thread every `period_s` seconds (and never at the same time as a task).
  // `wake_fd`, if given, is asked on the thread before each wait: a descriptor whose input asks
  // for a tick (-1: none now).
  IoThread(double period_s, Task tick, std::function<int()> wake_fd = {});
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;
  // Stops after the task or tick that runs now; tasks not yet run are dropped.
  ~IoThread();
  // Stops and joins the thread (the task or tick under way ends first; queued tasks are
  // dropped). The object stays usable by code that still holds it: posts are then ignored.
  void stop();

  void start();
  void post(Task task);

  // Runs `f` on the thread and waits for its value (for a resume's questions, asked before the
  // loop runs). From the thread itself, runs it at once.
  template <class F>
  auto call(F f) -> decltype(f()) {
    if (std::this_thread::get_id() == thread_.get_id()) return f();
    using R = decltype(f());
    auto promise = std::make_shared<std::promise<R>>();
    auto future = promise->get_future();
    post([promise, f = std::move(f)]() mutable {
      if constexpr (std::is_void_v<R>) {
        f();
        promise->set_value();
      } else {
        promise->set_value(f());
      }
    });
    return future.get();
  }

  // The next tick runs within `s` seconds (sooner than its period; a later period is kept):
  // for a host where output is expected soon (an attempt just started, a line just sent).
  void tick_within(double s);

  // Tasks posted and not yet started.
  [[nodiscard]] size_t backlog() const;

 private:
  void loop();
  // Waits until `due`, a post, a tick_within() or input on the wake descriptor (then a tick is
  // due now); called without the lock.
  void wait(std::chrono::steady_clock::time_point due,
            std::chrono::steady_clock::time_point last_tick);
  void poke();

  double period_s_;
  Task tick_;
  std::function<int()> wake_fd_;
  int event_fd_ = -1;  // written by post(), tick_within() and the destructor
  mutable std::mutex mutex_;
  std::deque<Task> tasks_;
  std::chrono::steady_clock::time_point soon_ = std::chrono::steady_clock::time_point::max();
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tune::exec
