// TensorBoard event files written by hand: TFRecord framing (length, masked CRC-32C of the
// length, data, masked CRC-32C of the data) around protobuf-encoded Event messages
// (Event: wall_time = 1 double, step = 2 int64, file_version = 3 string, summary = 5;
// Summary: value = 1 repeated; Summary.Value: tag = 1 string, simple_value = 2 float).
// No protobuf library: these few fields are a page of code, and no .proto file is needed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trial/result_log.hpp"
#include "util/error.hpp"

namespace tune::report {

// CRC-32C (Castagnoli) of `data`.
[[nodiscard]] uint32_t crc32c(std::string_view data);
// TFRecord's masked form of a CRC.
[[nodiscard]] uint32_t masked_crc(uint32_t crc);
// One TFRecord: the framing around `data`.
[[nodiscard]] std::string tfrecord(std::string_view data);
// An Event holding file_version "brain.Event:2" (every event file's first record).
[[nodiscard]] std::string version_event(double wall_time);
// An Event at `step` holding one simple_value per (tag, value).
[[nodiscard]] std::string scalars_event(double wall_time, int64_t step,
                                        const std::vector<std::pair<std::string, float>>& values);

// The scalars a result row gives TensorBoard: every numeric value (nested objects flattened to
// "a/b" tags), except the driver's bookkeeping keys; booleans and non-finite values are left out.
[[nodiscard]] std::vector<std::pair<std::string, float>> result_scalars(const nlohmann::json& row);

// A trial's event file, fed each result row as the driver records it (a ResultLog sink). The
// file (events.out.tfevents.<epoch s>.<host>, a numbered suffix if taken) is created at the first
// result, so a trial that reports nothing costs no file; rows are buffered and written with one
// write() per flush.
class EventWriter : public trial::ResultSink {
 public:
  EventWriter(std::filesystem::path trial_dir, std::string host);
  ~EventWriter() override;
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void add(const nlohmann::json& result) override;
  [[nodiscard]] Result<void> flush() override;
  // The file's path ("" until the first flush that had something to write).
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  [[nodiscard]] Result<void> create();

  std::filesystem::path dir_, path_;
  std::string host_;
  std::string buf_;
  int fd_ = -1;
  bool versioned_ = false;  // the file_version record is buffered or written
};

}  // namespace tune::report
