// Lays out a table of text columns in a given number of terminal cells: long names and paths
// shrink in the middle with "…", then the least important columns are left out, and no line is
// ever wider than the width (so an in-place redraw never wraps).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tune::ui {

struct Column {
  std::string title;
  std::vector<std::string> cells;   // one per row; untrusted text is sanitized when laid out
  std::vector<std::string> colors;  // optional: an SGR prefix per row ("" = none)
  size_t min_width = 0;             // a shrinkable column never goes below this (0: never shrinks)
  size_t soft_width = 0;            // it shrinks below this only once no column is left to drop
  int drop_priority = 0;            // 0: always shown; otherwise the highest is left out first
  bool right = false;               // numbers: right-aligned
};

// A column with no cells yet.
[[nodiscard]] inline Column column(std::string title, size_t min_width = 0, int drop_priority = 0,
                                   bool right = false, size_t soft_width = 0) {
  Column c;
  c.soft_width = soft_width;
  c.title = std::move(title);
  c.min_width = min_width;
  c.drop_priority = drop_priority;
  c.right = right;
  return c;
}

// The table's lines (each ending in '\n'), at most `width` cells each. Columns are separated by
// two spaces. Titles and cells wider than their column are shortened in the middle.
[[nodiscard]] std::string layout_table(std::vector<Column> columns, size_t width);

// The width to use when none is known (not a terminal, no COLUMNS): wide enough that nothing
// shrinks in a log file.
inline constexpr size_t kUnlimitedWidth = 100000;

}  // namespace tune::ui
