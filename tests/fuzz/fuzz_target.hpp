// What every fuzz target shares: the libFuzzer entry point, and a way to end the process loudly
// (abort) when a target finds what must never happen, so libFuzzer and the replay driver stop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

// libFuzzer's entry point: one input. Returns 0; a finding aborts.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tune::fuzz {

// Ends the run: a finding (an exception of an undocumented type, a broken invariant).
[[noreturn]] inline void finding(std::string_view what) {
  std::fprintf(stderr, "fuzz finding: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

// The input as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits `text` at the first `sep`: (before, after); after is empty when `sep` is absent.
inline std::pair<std::string_view, std::string_view> split_at(std::string_view text,
                                                              std::string_view sep) {
  size_t at = text.find(sep);
  if (at == std::string_view::npos) return {text, {}};
  return {text.substr(0, at), text.substr(at + sep.size())};
}

}  // namespace tune::fuzz
