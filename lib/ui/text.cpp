#include "ui/text.hpp"

#include <algorithm>
#include <vector>

namespace tune::ui {

namespace {

constexpr std::string_view kEllipsis = "\xE2\x80\xA6";  // U+2026, one cell
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Decodes one well-formed UTF-8 sequence at s[i] (RFC 3629); returns its length, 0 if invalid.
size_t decode(std::string_view s, size_t i, char32_t& out) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  unsigned char c = b(0);
  if (c < 0x80) {
    out = c;
    return 1;
  }
  size_t len = c >= 0xC2 && c <= 0xDF   ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
  if (len == 0 || i + len > s.size()) return 0;
  char32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  out = cp;
  return len;
}

bool is_control(char32_t c) {
  return c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0x9F) || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069) || c == 0x061C || c == 0x200E || c == 0x200F;
}

struct Range {
  char32_t lo, hi;
};

bool in(const Range* r, size_t n, char32_t c) {
  for (size_t i = 0; i < n; ++i)
    if (c >= r[i].lo && c <= r[i].hi) return true;
  return false;
}

constexpr Range kZero[] = {{0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD},  {0x0610, 0x061A},
                           {0x064B, 0x065F}, {0x0E31, 0x0E31}, {0x0E34, 0x0E3A},  {0x1AB0, 0x1AFF},
                           {0x1DC0, 0x1DFF}, {0x200B, 0x200D}, {0x20D0, 0x20FF},  {0xFE00, 0xFE0F},
                           {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}, {0xE0100, 0xE01EF}};
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},
    {0x23F0, 0x23F0},   {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x26A1, 0x26A1},   {0x26AA, 0x26AB},   {0x26BD, 0x26BE},
    {0x26C4, 0x26C5},   {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F5},
    {0x26FA, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},   {0x2728, 0x2728},
    {0x274C, 0x274C},   {0x2753, 0x2755},   {0x2757, 0x2757},   {0x2795, 0x2797},
    {0x27B0, 0x27B0},   {0x27BF, 0x27BF},   {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},
    {0x2B55, 0x2B55},   {0x2E80, 0x303E},   {0x3041, 0x33FF},   {0x3400, 0x4DBF},
    {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xA960, 0xA97F},   {0xAC00, 0xD7A3},
    {0xF900, 0xFAFF},   {0xFE10, 0xFE19},   {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},
    {0xFFE0, 0xFFE6},   {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E},
    {0x1F191, 0x1F19A}, {0x1F200, 0x1F251}, {0x1F300, 0x1F64F}, {0x1F680, 0x1F6FF},
    {0x1F900, 0x1F9FF}, {0x1FA70, 0x1FAFF}, {0x20000, 0x3FFFD}};

// A sanitized string as clusters: one printing code point and the zero-width ones after it.
struct Cluster {
  std::string_view bytes;
  size_t width;
};

std::vector<Cluster> clusters(std::string_view clean) {
  std::vector<Cluster> out;
  for (size_t i = 0; i < clean.size();) {
    char32_t c = 0;
    size_t len = decode(clean, i, c);
    if (len == 0) len = 1;  // cannot happen on sanitized text; never loop forever
    size_t w = cell_width(c);
    if (w == 0 && !out.empty()) {
      out.back().bytes =
          clean.substr(out.back().bytes.data() - clean.data(), out.back().bytes.size() + len);
    } else {
      out.push_back({clean.substr(i, len), w});
    }
    i += len;
  }
  return out;
}

}  // namespace

size_t cell_width(char32_t c) {
  if (in(kZero, std::size(kZero), c)) return 0;
  if (c >= 0x1100 && in(kWide, std::size(kWide), c)) return 2;
  return 1;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c = 0;
    size_t len = decode(s, i, c);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (is_control(c))
      out += c == '\t' ? ' ' : '?';
    else
      out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t display_width(std::string_view s) {
  std::string clean = sanitize(s);
  size_t w = 0;
  for (const auto& c : clusters(clean)) w += c.width;
  return w;
}

namespace {

enum class Cut { kMiddle, kEnd };

// `s` sanitized and at most `width` cells: whole clusters from its start and (when cut in the
// middle) its end, around "…". A wide character that does not fit the start's half leaves its
// cell to the end.
std::string fit_cells(std::string_view s, size_t width, Cut cut) {
  std::string clean = sanitize(s);
  auto cs = clusters(clean);
  size_t total = 0;
  for (const auto& c : cs) total += c.width;
  if (total <= width) return clean;
  if (width == 0) return "";
  size_t budget = width - 1;  // the ellipsis takes one cell
  size_t head_budget = cut == Cut::kEnd ? budget : (budget + 1) / 2;
  size_t head = 0, used = 0;
  while (head < cs.size() && used + cs[head].width <= head_budget) used += cs[head++].width;
  size_t tail_budget = cut == Cut::kEnd ? 0 : budget - used;
  size_t tail = cs.size(), tail_used = 0;
  while (tail > head && tail_used + cs[tail - 1].width <= tail_budget)
    tail_used += cs[--tail].width;
  std::string out;
  for (size_t i = 0; i < head; ++i) out += cs[i].bytes;
  out += kEllipsis;
  for (size_t i = tail; i < cs.size(); ++i) out += cs[i].bytes;
  return out;
}

}  // namespace

std::string fit_middle(std::string_view s, size_t width) {
  return fit_cells(s, width, Cut::kMiddle);
}

std::string fit_end(std::string_view s, size_t width) {
  return fit_cells(s, width, Cut::kEnd);
}

std::string pad_cells(std::string_view s, size_t width, bool right) {
  std::string text = fit_middle(s, width);
  size_t w = display_width(text);
  std::string fill(width > w ? width - w : 0, ' ');
  return right ? fill + text : text + fill;
}

}  // namespace tune::ui
