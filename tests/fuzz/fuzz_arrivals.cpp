// Fuzz target: a trial's stdout.times -> exec::ArrivalReader. The file lies in the trial's own
// dir, so its bytes are untrusted: never throws, and what it yields does not depend on how the
// bytes were split into reads. Input: 1 byte (the attempt), 1 byte (where to split), the file.
#include <string>
#include <vector>

#include "exec/arrivals.hpp"
#include "fuzz_target.hpp"

namespace {

struct Out {
  std::vector<tune::exec::Arrival> arrivals;
  std::optional<tune::exec::HostTime> started;
};

Out read(int attempt, std::string_view text, size_t cut) {
  tune::exec::ArrivalReader r(attempt);
  Out o;
  r.feed(text.substr(0, cut), o.arrivals, o.started);
  r.feed(text.substr(cut), o.arrivals, o.started);
  if (r.offset() != text.size()) tune::fuzz::finding("offset is not the bytes fed");
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tune;
  if (size < 2) return 0;
  int attempt = 1 + data[0] % 4;
  std::string_view text = fuzz::as_text(data + 2, size - 2);
  size_t cut = text.empty() ? 0 : data[1] % (text.size() + 1);
  try {
    Out whole = read(attempt, text, text.size());
    Out split = read(attempt, text, cut);
    if (whole.arrivals.size() != split.arrivals.size() ||
        whole.started.has_value() != split.started.has_value())
      fuzz::finding("the notes depend on how the bytes were split");
    if (!whole.arrivals.empty() && !whole.started) fuzz::finding("notes without a start line");
    for (size_t i = 0; i < whole.arrivals.size(); ++i) {
      const auto& a = whole.arrivals[i];
      if (a.end != split.arrivals[i].end) fuzz::finding("split changed a note");
      if (a.end == 0 || a.at.mono <= 0 || a.at.wall <= 0) fuzz::finding("a note out of range");
    }
  } catch (const std::exception& ex) {
    fuzz::finding(std::string("ArrivalReader threw: ") + ex.what());
  }
  return 0;
}
