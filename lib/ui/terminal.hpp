// The terminal behind a file descriptor: its width (TIOCGWINSZ), and a flag raised on SIGWINCH
// so that a live view redraws at the new size.
#pragma once

#include <cstddef>
#include <optional>

namespace tune::ui {

// Columns of the terminal on `fd`; else the COLUMNS environment variable if it is a number;
// else nullopt (not a terminal).
[[nodiscard]] std::optional<size_t> terminal_columns(int fd);

// The width to lay a table out in for output on `fd`: the terminal's, else COLUMNS, else
// unlimited (a pipe or a file gets whole lines).
[[nodiscard]] size_t output_width(int fd);

// Whether stderr is a terminal that can redraw in place: a TTY whose TERM is not "dumb". The
// live table, and progress bars, draw only then.
[[nodiscard]] bool stderr_can_redraw();

// Installs a SIGWINCH handler (SA_RESTART) that only raises a flag. Idempotent.
void watch_resizes();

// Whether the terminal was resized since the last take_resize().
[[nodiscard]] bool resize_pending();
// True once after each resize since the last call.
[[nodiscard]] bool take_resize();
// Rows of the terminal on `fd`; else LINES; else nullopt.
[[nodiscard]] std::optional<size_t> terminal_rows(int fd);

}  // namespace tune::ui
