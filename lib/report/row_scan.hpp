// A fast reader of one result row's top-level numbers: `tune report` reads a million result.json
// lines for a big experiment, and building a JSON document of each (every key, string and
// nested config) cost most of its time. This scanner walks the line once, keeps only the
// top-level keys and their numbers, and gives up on anything unusual (escapes in a key,
// bytes that are not well-formed UTF-8, a repeated key, deep nesting, invalid JSON): the caller
// then parses the line fully, so the values read are exactly those of the full parser in every
// case. UTF-8 text in keys and strings ("précision", "日本") stays on the fast path.
#pragma once

#include <string_view>
#include <vector>

namespace tune::report {

// One top-level member of a row: its key (a view into the line) and, when its value is a
// number (NaN, Infinity and -Infinity included), the number and whether it was written as an
// integer (no fraction, no exponent).
struct RowField {
  std::string_view key;
  bool is_number = false;
  bool integer = false;
  double value = 0;
};

// Reads `line` (one JSON object) into `fields`, sorted by key. Returns false when the line
// needs the full parser (it may still be valid, or not): `fields` is then unspecified.
[[nodiscard]] bool scan_row(std::string_view line, std::vector<RowField>& fields);

}  // namespace tune::report
