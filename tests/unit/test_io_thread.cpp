// The per-host I/O thread (exec/io_thread.hpp): tasks in order, a tick that tasks never
// starve, call() answering, tasks not yet run dropped at destruction, and ticks brought forward.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/io_thread.hpp"

using namespace tune::exec;
using namespace std::chrono_literals;

TEST_CASE("io thread: tasks run in the order posted, call() returns their value", "[io_thread]") {
  std::mutex m;
  std::vector<int> seen;
  IoThread io(10.0, nullptr);
  io.start();
  for (int i = 0; i < 100; ++i)
    io.post([&, i] {
      std::lock_guard lock(m);
      seen.push_back(i);
    });
  int answer = io.call([&] {
    std::lock_guard lock(m);
    return static_cast<int>(seen.size());
  });
  CHECK(answer == 100);  // everything posted before it has run
  for (int i = 0; i < 100; ++i) CHECK(seen[i] == i);
  // From the thread itself, call() runs at once instead of waiting on itself.
  CHECK(io.call([&] { return io.call([] { return 7; }); }) == 7);
}

TEST_CASE("io thread: the tick runs on its period even under a stream of tasks", "[io_thread]") {
  std::atomic<int> ticks{0};
  std::atomic<bool> flood{true};
  IoThread io(0.01, [&] { ++ticks; });
  io.start();
  // Tasks that each repost themselves: the queue is never empty.
  std::function<void()> again = [&] {
    std::this_thread::sleep_for(1ms);
    if (flood) io.post(again);
  };
  for (int i = 0; i < 4; ++i) io.post(again);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (ticks < 5 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  flood = false;
  CHECK(ticks >= 5);
}

TEST_CASE("io thread: tasks not yet run are dropped when it goes", "[io_thread]") {
  std::atomic<int> ran{0};
  std::atomic<bool> release{false}, started{false};
  std::thread releaser;
  {
    IoThread io(10.0, nullptr);
    io.start();
    io.post([&] {
      started = true;
      while (!release) std::this_thread::sleep_for(1ms);
      ++ran;
    });
    while (!started) std::this_thread::sleep_for(1ms);
    for (int i = 0; i < 10; ++i) io.post([&] { ++ran; });
    CHECK(io.backlog() >= 9);
    releaser = std::thread([&] {
      std::this_thread::sleep_for(20ms);
      release = true;
    });
  }  // waits for the running task only
  releaser.join();
  CHECK(ran == 1);
}

TEST_CASE("io thread: tick_within brings the next tick forward, also from the tick itself",
          "[io_thread]") {
  std::atomic<int> ticks{0};
  std::atomic<int> chain{0};  // ticks still to ask for a quick next one
  IoThread* self = nullptr;
  IoThread io(3600.0, [&] {
    ++ticks;
    if (chain > 0) {
      --chain;
      self->tick_within(0.001);
    }
  });
  self = &io;
  io.start();
  io.tick_within(0.001);  // from outside: a tick long before its hour
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (ticks < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  REQUIRE(ticks == 1);
  chain = 3;
  io.tick_within(0.001);  // a tick that asks for the next one, three times over
  while (ticks < 5 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  CHECK(ticks == 5);
  std::this_thread::sleep_for(50ms);
  CHECK(ticks == 5);  // and then back to its period
  // A later request never delays an earlier one.
  io.tick_within(0.001);
  io.tick_within(3000.0);
  while (ticks < 6 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  CHECK(ticks == 6);
}

TEST_CASE("io thread: input on the wake descriptor brings a tick at once", "[io_thread]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  std::atomic<int> ticks{0};
  IoThread io(
      100.0,
      [&] {
        char c;
        (void)!::read(p[0], &c, 1);  // (the tick takes the input, as a host's tick reads it)
        ++ticks;
      },
      [&] { return p[0]; });
  io.start();
  std::this_thread::sleep_for(50ms);
  CHECK(ticks == 0);  // (the period is 100 s)
  REQUIRE(::write(p[1], "x", 1) == 1);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ticks == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  CHECK(ticks == 1);
  ::close(p[1]);
  io.post([] {});
  io.call([] { return 0; });
  ::close(p[0]);
}

TEST_CASE("io thread: input the tick leaves unread does not spin it", "[io_thread]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  REQUIRE(::write(p[1], "x", 1) == 1);  // readable for ever
  std::atomic<int> ticks{0};
  {
    IoThread io(
        100.0, [&] { ++ticks; }, [&] { return p[0]; });
    io.start();
    std::this_thread::sleep_for(200ms);
  }
  // At most one tick per kMinGap (2 ms): ~100 in 200 ms, not a busy loop's tens of thousands.
  CHECK(ticks >= 1);
  CHECK(ticks <= 200 / 2 + 20);
  ::close(p[0]);
  ::close(p[1]);
}

TEST_CASE("io thread: stop() joins it while its owner's pointer still holds it", "[io_thread]") {
  // Its tick reaches the thread through the owner's unique_ptr, as an SSH host's does
  // (w.io->tick_within). unique_ptr::reset() nulls the pointer before the destructor joins:
  // a tick under way then called through null (a driver crashed so at its end).
  std::unique_ptr<IoThread> io;
  std::atomic<bool> in_tick{false};
  std::atomic<int> ticks{0};
  io = std::make_unique<IoThread>(0.001, [&] {
    in_tick = true;
    std::this_thread::sleep_for(50ms);
    io->tick_within(0.001);  // (through the pointer, after the wait)
    ++ticks;
  });
  io->start();
  while (!in_tick) std::this_thread::sleep_for(1ms);
  io->stop();  // the tick under way ends first
  int after = ticks;
  CHECK(after >= 1);
  std::this_thread::sleep_for(20ms);
  CHECK(ticks == after);       // and no other
  io->post([&] { ++ticks; });  // ignored once stopped
  io.reset();
  CHECK(ticks == after);
}
