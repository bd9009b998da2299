// A trial's result files: result.json (one JSON object per line, every key the trial reported
// plus the driver's fields) and progress.csv (the same rows, flattened).
//
// progress.csv keeps one header for the whole file: when a result brings a key no earlier row
// had, the file is regenerated from result.json with the wider header (atomically), so no
// column is ever lost and every row lines up with the header.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <vector>

#include "util/error.hpp"

namespace tune::trial {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Another file fed the same result rows (TensorBoard events): told each row as it is appended,
// and flushed and dropped with the log.
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // One result row, as appended.
  virtual void add(const json& result) = 0;
  // Writes what add() buffered.
  [[nodiscard]] virtual Result<void> flush() = 0;
};

class ResultLog {
 public:
  ResultLog() = default;
  ~ResultLog();
  ResultLog(const ResultLog&) = delete;
  ResultLog& operator=(const ResultLog&) = delete;

  // Opens the files for appending; an existing progress.csv's header is kept.
  [[nodiscard]] Result<void> open(const fs::path& trial_dir);
  // Feeds every row appended from now on to `sink` too (until close()).
  void set_sink(std::unique_ptr<ResultSink> sink) { sink_ = std::move(sink); }
  // Whether a sink is set.
  [[nodiscard]] bool has_sink() const { return sink_ != nullptr; }
  // Buffers one result; flush() writes everything buffered with one write() per file.
  void append(const json& result);
  [[nodiscard]] Result<void> flush();
  // The trial ended normally: its last row (of this log's rows) gets "done": true, in
  // result.json and progress.csv, then everything is flushed. Nothing to do without a row.
  [[nodiscard]] Result<void> mark_last_done();
  void close();
  [[nodiscard]] bool is_open() const { return json_fd_ >= 0; }

  // Keeps only rows whose training_iteration <= `iteration` (all rows dropped for 0), rewriting
  // result.json and progress.csv atomically (only if something is dropped). A torn last line is
  // dropped. The rows kept are stored in `kept` if given (which costs parsing them all).
  [[nodiscard]] static Result<void> truncate_after(const fs::path& trial_dir, int64_t iteration,
                                                   std::vector<json>* kept = nullptr);

  // Reads result.json; a torn or unparsable line is skipped (counted in `bad_lines`).
  [[nodiscard]] static Result<std::vector<json>> read_results(const fs::path& trial_dir,
                                                              size_t* bad_lines = nullptr);

 private:
  [[nodiscard]] Result<void> rewrite_csv();
  // flush() of result.json and progress.csv only.
  [[nodiscard]] Result<void> flush_files();
  void add_columns(const json& obj, const std::string& prefix, bool& added);

  static constexpr size_t kMaxPending = 64u << 20;  // result rows held while writes fail

  fs::path dir_;
  std::unique_ptr<ResultSink> sink_;
  int json_fd_ = -1;
  int csv_fd_ = -1;
  std::vector<std::string> columns_;
  std::unordered_set<std::string> known_;
  std::string json_buf_, csv_buf_;
  bool csv_rewrite_ = false;
  // Where the last appended row starts: in the buffer while unwritten (npos once written),
  // then in the file.
  std::string last_row_;  // its result.json text, without the newline
  size_t last_json_buf_ = std::string::npos, last_csv_buf_ = std::string::npos;
  off_t last_json_file_ = -1, last_csv_file_ = -1;
};

}  // namespace tune::trial
