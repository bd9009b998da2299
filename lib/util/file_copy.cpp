#include "util/file_copy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tune::util {

int open_regular(const char* path, off_t& size) {
  return open_regular(AT_FDCWD, path, size);
}

int open_regular(int dir, const char* name, off_t& size) {
  int fd = ::openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st {};
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    int e = S_ISREG(st.st_mode) ? errno : EINVAL;
    ::close(fd);
    errno = e;
    return -1;
  }
  size = st.st_size;
  return fd;
}

int copy_file_data(int in, int out, off_t size) {
  char buf[1 << 16];
  for (off_t at = 0; at < size;) {
    off_t data = ::lseek(in, at, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // (only a hole from here)
      if (errno != EINVAL) return errno;
      data = at;  // (a filesystem without it: all data)
    }
    off_t hole = std::min(size, std::max(data, ::lseek(in, data, SEEK_HOLE)));
    if (hole <= data) hole = size;
    if (::lseek(in, data, SEEK_SET) < 0 || ::lseek(out, data, SEEK_SET) < 0) return errno;
    for (off_t left = hole - data; left > 0;) {
      ssize_t n = ::read(in, buf, static_cast<size_t>(std::min<off_t>(left, sizeof buf)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      if (n == 0) return ::ftruncate(out, hole - left) == 0 ? 0 : errno;  // (cut meanwhile)
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::write(out, buf + off, static_cast<size_t>(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : EIO;
        off += w;
      }
      left -= n;
    }
    at = hole;
  }
  return ::ftruncate(out, size) == 0 ? 0 : errno;  // (a hole at the end)
}

}  // namespace tune::util
