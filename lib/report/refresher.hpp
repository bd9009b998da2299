// The running driver's periodic report: <experiment>/report.html rewritten every period, built
// on a thread of its own from the files on disk (the state as last saved, each result.json), so
// the driver's loop only asks for it and never waits on it.
#pragma once

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tune::report {

class Refresher {
 public:
  // `period_s` <= 0: never refreshes.
  Refresher(std::filesystem::path exp_dir, double period_s);
  // Waits for a report being written, then stops the thread.
  ~Refresher();
  Refresher(const Refresher&) = delete;
  Refresher& operator=(const Refresher&) = delete;

  // Called from the driver's loop with its monotonic clock: asks for a report when the period
  // (or five times the last report's cost, if longer) has passed since the last ask (never blocks;
  // an ask while one is being written is dropped). Returns what went wrong with the last report
  // since the previous call ("" if nothing), for the loop to log.
  [[nodiscard]] std::string poll(double now);
  // Writes the report once more now and waits for it (the end of a run), calling
  // `progress(trials read, trials)` from the writing thread meanwhile (a progress bar). Returns
  // an error message or "".
  [[nodiscard]] std::string write_now(std::function<void(size_t, size_t)> progress = {});
  // Reports written so far (tests).
  [[nodiscard]] int written() const;

 private:
  void loop();

  std::filesystem::path dir_;
  double period_s_;
  double next_ = 0;
  double last_cost_s_ = 0;  // how long the last report took to write
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  bool asked_ = false, busy_ = false, quit_ = false;
  int written_ = 0;
  std::string error_;
  std::function<void(size_t, size_t)> progress_;  // for the report asked by write_now
  std::thread thread_;                            // last: started once everything above exists
};

}  // namespace tune::report
