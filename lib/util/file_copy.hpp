// Opening and copying one regular file, holes kept as holes. Libc only: tune-supervisor links
// it (a checkpoint moved across filesystems on an SSH host), tune-agent too (agent/dir_changes),
// as the driver does (util::copy_dir).
#pragma once

#include <sys/types.h>

namespace tune::util {

// Opens `path` for reading a checkpoint's file: never through a symlink, never waiting on a
// FIFO swapped in (O_NONBLOCK), and only if what is open is a regular file (its size then in
// `size`). An fd, or -1 with errno set (EINVAL: not a regular file).
[[nodiscard]] int open_regular(const char* path, off_t& size);
// The same for `name` in the dir open as `dir` (openat).
[[nodiscard]] int open_regular(int dir, const char* name, off_t& size);

// The first `size` bytes of `in` into the new, empty file `out`, only the data between holes
// (SEEK_DATA / SEEK_HOLE: a sparse file of a terabyte is not written out), and `out` made
// `size` bytes long (shorter if `in` was cut meanwhile). 0, or an errno.
[[nodiscard]] int copy_file_data(int in, int out, off_t size);

}  // namespace tune::util
