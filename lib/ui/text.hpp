// Terminal text: untrusted bytes made safe to print, their width in terminal cells, and
// shortening in the middle with "…" so that both ends of a name or path stay readable.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tune::ui {

// `s` with nothing a terminal would act on: control characters (C0, DEL, C1, so ESC and every
// escape sequence) and bidirectional overrides become '?', bytes that are not well-formed UTF-8
// become U+FFFD. Valid UTF-8 otherwise passes through.
[[nodiscard]] std::string sanitize(std::string_view s);

// Terminal cells one code point takes: 0 for combining marks and zero-width characters, 2 for
// East Asian wide and emoji, 1 otherwise.
[[nodiscard]] size_t cell_width(char32_t c);

// Cells `s` takes once sanitized.
[[nodiscard]] size_t display_width(std::string_view s);

// `s` sanitized and at most `width` cells wide: if longer, its start and end joined by "…"
// (never cut inside a multi-byte sequence or before a combining mark).
[[nodiscard]] std::string fit_middle(std::string_view s, size_t width);

// `s` sanitized, cut at the end to at most `width` cells with "…" when cut.
[[nodiscard]] std::string fit_end(std::string_view s, size_t width);

// `s` fitted in the middle, then padded with spaces to exactly `width` cells (left- or
// right-aligned).
[[nodiscard]] std::string pad_cells(std::string_view s, size_t width, bool right = false);

}  // namespace tune::ui
