// Slow file work off the driver's loop: copying a checkpoint across filesystems, deleting old
// checkpoints, walking trial dirs. One background thread runs jobs in the order submitted, so
// jobs on the same directory never race; the loop collects what finished without blocking.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "util/error.hpp"

namespace tune::util {

class FileWorker {
 public:
  // A job gets a flag that turns true when the worker is told to give up (Ctrl-C twice): long
  // jobs check it and return early, leaving nothing half-done under a final name. It returns
  // a note for the log ("" for none): jobs never log themselves (the log is the loop's).
  using Job = std::function<Result<std::string>(const std::atomic<bool>& cancel)>;
  struct Done {
    uint64_t id = 0;
    Result<std::string> result;
  };

  FileWorker();
  // Cancels what is queued, waits for the running job to return, joins the thread.
  ~FileWorker();
  FileWorker(const FileWorker&) = delete;
  FileWorker& operator=(const FileWorker&) = delete;

  // Queues a job; returns its id (1, 2, ...).
  uint64_t submit(Job job);
  // Jobs finished since the last call, in order; never blocks.
  [[nodiscard]] std::vector<Done> take_done();
  // Jobs submitted and not yet taken by take_done().
  [[nodiscard]] size_t outstanding() const { return outstanding_; }
  // Waits until every queued job has run (or `timeout_s` passed); returns false on time-out.
  bool drain(double timeout_s);
  // Tells running and queued jobs to give up.
  void cancel() { cancel_ = true; }
  // Whether cancel() was called: jobs that failed since may have given up, not failed.
  [[nodiscard]] bool cancelled() const { return cancel_; }

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::pair<uint64_t, Job>> queue_;
  std::vector<Done> done_;
  bool busy_ = false;
  bool quit_ = false;
  std::atomic<bool> cancel_{false};
  uint64_t next_id_ = 0;
  size_t outstanding_ = 0;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace tune::util
