#include "agent/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
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
  // inode: the device the kernel prints is the superblock's, which stat() may not give (overlay).
  int holder = -1;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    if (std::strstr(line, "->") || !std::strstr(line, " FLOCK ")) continue;
    int pid = 0;
    unsigned major = 0, minor = 0;
    unsigned long ino = 0;
    const char* p = std::strstr(line, "WRITE ");
    if (!p || std::sscanf(p + 6, "%d %x:%x:%lu", &pid, &major, &minor, &ino) != 4) continue;
    if (ino != static_cast<unsigned long>(st.st_ino) || pid <= 0) continue;
    if (holder > 0 && holder != pid) {  // two locks on this inode number: cannot tell which
      holder = -1;
      break;
    }
    holder = pid;
  }
  std::fclose(f);
  return holder;
}

}  // namespace tune::agent
