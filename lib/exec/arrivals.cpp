#include "exec/arrivals.hpp"

#include <charconv>

namespace tune::exec {

namespace {

constexpr size_t kMaxLine = 96;  // the longest note is "start" and three 20-digit numbers

// The next space-separated word of `s` as a number in [1, 2^62], else nullopt.
std::optional<uint64_t> number(std::string_view& s) {
  size_t space = s.find(' ');
  std::string_view word = s.substr(0, space);
  s.remove_prefix(space == std::string_view::npos ? s.size() : space + 1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (ec != std::errc() || end != word.data() + word.size() || v == 0 || v > (1ull << 62))
    return std::nullopt;
  return v;
}

std::optional<HostTime> times(std::string_view& s) {
  auto wall = number(s);
  auto mono = number(s);
  if (!wall || !mono || !s.empty()) return std::nullopt;
  return HostTime{static_cast<double>(*wall) / 1e9, static_cast<double>(*mono) / 1e9};
}

}  // namespace

void ArrivalReader::line(std::string_view s, std::vector<Arrival>& out,
                         std::optional<HostTime>& started) {
  if (s.starts_with("start ")) {
    s.remove_prefix(6);
    auto attempt = number(s);
    auto at = times(s);
    if (!attempt || !at) return;
    in_attempt_ = *attempt == static_cast<uint64_t>(attempt_);
    if (in_attempt_) started = *at, last_end_ = 0;
    return;
  }
  if (!in_attempt_) return;
  auto end = number(s);
  auto at = times(s);
  // Offsets only grow within an attempt: a note that goes back is not the supervisor's.
  if (!end || !at || *end < last_end_) return;
  last_end_ = *end;
  out.push_back(Arrival{*end, *at});
}

void ArrivalReader::feed(std::string_view bytes, std::vector<Arrival>& out,
                         std::optional<HostTime>& started) {
  offset_ += bytes.size();
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    std::string_view piece = bytes.substr(0, nl);
    if (!skipping_) {
      if (partial_.size() + piece.size() > kMaxLine) {
        skipping_ = true;
        partial_.clear();
      } else if (nl != std::string_view::npos && partial_.empty()) {
        line(piece, out, started);
      } else {
        partial_.append(piece);
        if (nl != std::string_view::npos) line(partial_, out, started);
      }
    }
    if (nl == std::string_view::npos) break;
    partial_.clear();
    skipping_ = false;
    bytes.remove_prefix(nl + 1);
  }
}

}  // namespace tune::exec
