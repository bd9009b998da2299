#include "util/file_worker.hpp"

#include <chrono>

namespace tune::util {

FileWorker::FileWorker() : thread_([this] { loop(); }) {}

FileWorker::~FileWorker() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
    cancel_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t FileWorker::submit(Job job) {
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = ++next_id_;
    queue_.emplace_back(id, std::move(job));
    ++outstanding_;
  }
  wake_.notify_one();
  return id;
}

std::vector<FileWorker::Done> FileWorker::take_done() {
  std::vector<Done> out;
  std::lock_guard lock(mu_);
  out.swap(done_);
  outstanding_ -= out.size();
  return out;
}

bool FileWorker::drain(double timeout_s) {
  std::unique_lock lock(mu_);
  return idle_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                        [this] { return queue_.empty() && !busy_; });
}

void FileWorker::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit, nothing left
    auto [id, job] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Result<std::string> r;
    try {
      r = job(cancel_);
    } catch (const std::exception& e) {  // a filesystem error thrown by the library
      r = fail(e.what());
    }
    lock.lock();
    busy_ = false;
    done_.push_back({id, std::move(r)});
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace tune::util
