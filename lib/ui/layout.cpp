#include "ui/layout.hpp"

#include <algorithm>
#include <numeric>

#include "ui/text.hpp"

namespace tune::ui {

namespace {

constexpr size_t kGap = 2;

size_t natural_width(const Column& c) {
  size_t w = display_width(c.title);
  for (const auto& cell : c.cells) w = std::max(w, display_width(cell));
  return w;
}

size_t total(const std::vector<size_t>& widths, const std::vector<bool>& shown) {
  size_t sum = 0, n = 0;
  for (size_t i = 0; i < widths.size(); ++i)
    if (shown[i]) sum += widths[i], ++n;
  return sum + (n ? (n - 1) * kGap : 0);
}

// Narrows shrinkable columns one cell at a time, the widest first (so wide columns share the
// cut), down to floor(i), until the table fits or none can shrink.
template <typename Floor>
void shrink(const std::vector<Column>& cols, std::vector<size_t>& widths,
            const std::vector<bool>& shown, size_t width, Floor floor) {
  for (size_t sum = total(widths, shown); sum > width; --sum) {
    size_t best = cols.size();
    for (size_t i = 0; i < cols.size(); ++i) {
      if (!shown[i] || cols[i].min_width == 0 || widths[i] <= floor(i)) continue;
      if (best == cols.size() || widths[i] > widths[best]) best = i;
    }
    if (best == cols.size()) return;
    --widths[best];
  }
}

}  // namespace

std::string layout_table(std::vector<Column> cols, size_t width) {
  if (cols.empty()) return "";
  std::vector<size_t> widths(cols.size());
  std::vector<bool> shown(cols.size(), true);
  for (size_t i = 0; i < cols.size(); ++i) widths[i] = natural_width(cols[i]);
  std::vector<size_t> natural = widths;
  auto soft = [&](size_t i) { return std::max(cols[i].min_width, cols[i].soft_width); };
  auto hard = [&](size_t i) { return cols[i].min_width; };
  // First names and paths give up room down to a readable width, then the least important
  // columns go, and only with nothing left to drop do names shrink further.
  for (;;) {
    widths = natural;
    shrink(cols, widths, shown, width, soft);
    if (total(widths, shown) <= width) break;
    size_t drop = cols.size();
    for (size_t i = 0; i < cols.size(); ++i)
      if (shown[i] && cols[i].drop_priority > 0 &&
          (drop == cols.size() || cols[i].drop_priority >= cols[drop].drop_priority))
        drop = i;
    if (drop == cols.size()) {
      shrink(cols, widths, shown, width, hard);
      break;  // still too wide: every line is cut at the width below
    }
    shown[drop] = false;
  }
  size_t rows = 0;
  for (const auto& c : cols) rows = std::max(rows, c.cells.size());
  std::string out;
  auto line = [&](auto cell_of) {
    std::string text;
    size_t used = 0;
    bool first = true;
    for (size_t i = 0; i < cols.size(); ++i) {
      if (!shown[i]) continue;
      size_t gap = first ? 0 : kGap;
      if (used + gap >= width) break;
      size_t w = std::min(widths[i], width - used - gap);
      auto [cell, color] = cell_of(i);
      std::string padded = pad_cells(cell, w, cols[i].right);
      text += std::string(gap, ' ') + (color.empty() ? padded : color + padded + "\x1b[0m");
      used += gap + w;
      first = false;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  static const std::string kNone;
  line([&](size_t i) {
    return std::pair<const std::string&, const std::string&>(cols[i].title, kNone);
  });
  for (size_t r = 0; r < rows; ++r)
    line([&](size_t i) {
      const auto& c = cols[i];
      return std::pair<const std::string&, const std::string&>(
          r < c.cells.size() ? c.cells[r] : kNone, r < c.colors.size() ? c.colors[r] : kNone);
    });
  return out;
}

}  // namespace tune::ui
