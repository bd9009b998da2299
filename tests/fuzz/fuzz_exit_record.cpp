// Fuzz target: a supervisor's exit.json -> exec::ExitInfo (exec::parse_exit_record).
// The file lies in the trial's own dir, so its bytes are untrusted: never throws, and believes
// only a record of the attempt asked for. Input: 1 byte (the attempt), then the file's bytes.
#include <string>

#include "exec/executor.hpp"
#include "fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tune;
  if (size == 0) return 0;
  int attempt = data[0] % 8;
  std::string_view text = fuzz::as_text(data + 1, size - 1);
  try {
    auto info = exec::parse_exit_record(text, attempt);
    if (info && info->attempt != attempt) fuzz::finding("a record of another attempt");
  } catch (const std::exception& ex) {
    fuzz::finding(std::string("parse_exit_record threw: ") + ex.what());
  }
  return 0;
}
