// Splits a byte stream into lines, with a cap on line length (16 MiB).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace tune::trial {

// Feeds arbitrary chunks; calls `on_line` for each complete line (without '\n') and
// `on_overlong` once for each line longer than the cap, whose bytes are dropped, not kept.
// Memory stays bounded by the cap however long a line is.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line = 16u << 20) : max_(max_line) {}

  // Returns the number of bytes consumed as complete lines (to advance a saved offset).
  uint64_t feed(std::string_view data, const std::function<void(std::string_view)>& on_line,
                const std::function<void(uint64_t length)>& on_overlong);
  // Bytes held for an unfinished line.
  [[nodiscard]] size_t pending() const { return partial_.size(); }
  // Complete lines seen so far, overlong ones included (inside on_line: the current line's
  // 1-based number).
  [[nodiscard]] uint64_t lines() const { return lines_; }
  void reset() { partial_.clear(), skipping_ = false, line_bytes_ = 0, lines_ = 0; }

 private:
  size_t max_;
  std::string partial_;
  bool skipping_ = false;
  uint64_t line_bytes_ = 0;  // bytes of the current line so far
  uint64_t lines_ = 0;
};

}  // namespace tune::trial
