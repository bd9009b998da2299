#include "trial/line_splitter.hpp"

namespace tune::trial {

uint64_t LineSplitter::feed(std::string_view data,
                            const std::function<void(std::string_view)>& on_line,
                            const std::function<void(uint64_t)>& on_overlong) {
  uint64_t consumed = 0;
  while (!data.empty()) {
    size_t nl = data.find('\n');
    bool complete = nl != std::string_view::npos;
    std::string_view piece = data.substr(0, complete ? nl : data.size());
    if (complete) ++lines_;
    line_bytes_ += piece.size();
    if (!skipping_) {
      if (line_bytes_ > max_) {
        skipping_ = true;
        partial_.clear();
        partial_.shrink_to_fit();
      } else if (complete && partial_.empty()) {
        on_line(piece);  // fast path: no copy
      } else {
        partial_.append(piece);
        if (complete) on_line(partial_);
      }
    }
    if (!complete) break;
    if (skipping_) on_overlong(line_bytes_);
    consumed += line_bytes_ + 1;
    partial_.clear();
    skipping_ = false;
    line_bytes_ = 0;
    data.remove_prefix(nl + 1);
  }
  return consumed;
}

}  // namespace tune::trial
