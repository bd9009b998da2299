#include "agent/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tune::agent {

int lock_trial_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
  int saved = errno;
  ::close(fd);
  errno = saved;
  return -1;
}

int flock_holder(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  // (never by trying the lock: for that moment a supervisor starting there would be refused)
  FILE* f = std::fopen("/proc/locks", "re");
  if (!f) return -1;
  // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF" (a "->" line is a waiter). Matched by
  // inode, preferring the device too: the device the kernel prints is the superblock's, which
  // stat() may not give (overlay), so a holder on that inode number with another device counts
  // only when none matches both.
  int on_dev = -1, on_ino = -1;
  bool ambiguous = false;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    if (std::strstr(line, "->") || !std::strstr(line, " FLOCK ")) continue;
    int pid = 0;
    unsigned major = 0, minor = 0;
    unsigned long ino = 0;
    const char* p = std::strstr(line, "WRITE ");
    if (!p || std::sscanf(p + 6, "%d %x:%x:%lu", &pid, &major, &minor, &ino) != 4) continue;
    if (ino != static_cast<unsigned long>(st.st_ino) || pid <= 0) continue;
    if (major == ::major(st.st_dev) && minor == ::minor(st.st_dev)) {
      on_dev = pid;
    } else {
      ambiguous |= on_ino > 0 && on_ino != pid;
      on_ino = pid;
    }
  }
  int holder = on_dev > 0 ? on_dev : ambiguous ? -1 : on_ino;
  std::fclose(f);
  return holder;
}

}  // namespace tune::agent
