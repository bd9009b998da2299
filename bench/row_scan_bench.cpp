// The report's result-row reader on ASCII and UTF-8 rows (not a test; docs/BENCHMARKS.md).
// `tune report` reads every result.json line with report::scan_row and hands the lines it
// declines to the full JSON parser. Until the scanner took UTF-8, a row with a non-ASCII byte
// anywhere (a metric "précision", a value "日本") was always declined; "before" below is that
// route: the full parser, as series.cpp calls it (a slight underestimate: the old scanner first
// walked the line up to the byte it declined). "after" is scan_row on the same row. Thread CPU
// time, median of 7 rounds. Prints one JSON object.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "report/row_scan.hpp"
#include "util/json_ext.hpp"

namespace {

double cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// series.cpp's fallback: the whole line parsed, its top-level numbers taken.
bool full_parse(std::string_view line, nlohmann::json& doc, size_t& numbers) {
  doc = tune::util::parse_json_ext(line, 64);
  if (doc.is_discarded() || !doc.is_object()) return false;
  for (const auto& [k, v] : doc.items()) numbers += v.is_number() ? 1 : 0;
  return true;
}

template <class F>
double ns_per_line(const std::vector<std::string>& lines, F&& read) {
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) {
    double t0 = cpu_ns();
    for (const auto& l : lines)
      if (!read(l)) std::abort();
    rounds.push_back((cpu_ns() - t0) / static_cast<double>(lines.size()));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

std::string row(int i, bool utf8) {
  std::string metric = utf8 ? "pr\xC3\xA9\x63ision" : "precision";
  std::string value = utf8 ? "\xE6\x97\xA5\xE6\x9C\xAC" : "nihon";
  return "{\"training_iteration\": " + std::to_string(i) +
         ", \"loss\": " + std::to_string(1.0 / (i + 1)) + ", \"" + metric +
         "\": " + std::to_string(0.5 + i * 1e-4) +
         ", \"time_total_s\": " + std::to_string(i * 0.37) + ", \"dataset\": \"" + value +
         "\", \"done\": false, \"config\": {\"lr\": 0.001, \"optimizer\": \"adam\", \"tag\": \"" +
         value + "\"}, \"trial_id\": \"00042\", \"hostname\": \"gpu-node-17\"}";
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = argc > 1 ? std::stoul(argv[1]) : 20000;
  std::vector<std::string> ascii, utf8;
  for (size_t i = 0; i < n; ++i) {
    ascii.push_back(row(static_cast<int>(i), false));
    utf8.push_back(row(static_cast<int>(i), true));
  }
  std::vector<tune::report::RowField> fields;
  nlohmann::json doc;
  size_t numbers = 0;
  auto scan = [&](const std::string& l) { return tune::report::scan_row(l, fields); };
  auto full = [&](const std::string& l) { return full_parse(l, doc, numbers); };
  double ascii_scan = ns_per_line(ascii, scan);
  double utf8_before = ns_per_line(utf8, full);
  double utf8_after = ns_per_line(utf8, scan);
  std::printf(
      "{\"lines\": %zu, \"ascii_scan_ns\": %.0f, \"utf8_before_full_parse_ns\": %.0f, "
      "\"utf8_after_scan_ns\": %.0f, \"utf8_speedup\": %.2f, \"utf8_vs_ascii_scan\": %.2f}\n",
      n, ascii_scan, utf8_before, utf8_after, utf8_before / utf8_after, utf8_after / ascii_scan);
  return 0;
}
