#include "agent/dir_changes.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/base64.hpp"
#include "util/file_copy.hpp"

namespace tune::agent {

namespace {

struct Listing {
  timespec ref{};     // the last sync's mark (find -newer: strictly after it is changed)
  std::string lines;  // "n|o TYPE SIZE MTIME MODE PATH\n" per entry, as find prints them
  std::vector<std::string> data;  // each changed file's bytes, in the listing's order
  size_t entries = 0;
  uint64_t inline_bytes = 0;
  bool bad = false;  // an rsync is wanted
};

bool after(const timespec& a, const timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
}

bool excluded(const char* name) {
  for (const char* x : kSyncExcludes)
    if (::fnmatch(x, name, 0) == 0) return true;
  return false;
}

// A changed regular file's bytes, `size` of them; false if it is not that any more (replaced by
// a link or a FIFO, grown or cut since its stat), or cannot be read.
bool read_file(int dir, const char* name, uint64_t size, std::string& out) {
  off_t now = 0;
  int fd = util::open_regular(dir, name, now);
  if (fd < 0) return false;
  bool ok = static_cast<uint64_t>(now) == size;
  out.resize(ok ? size + 1 : 0);  // (one byte more: a file that grew is seen)
  size_t got = 0;
  while (ok && got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return ok && got == size;
}

// One entry `name` of the dir open as `dir` (at `prefix`, relative to the trial dir), and what
// it holds, depth first, each dir before its entries (find's order).
void walk(int dir, const std::string& prefix, Listing& l);

void entry(int dir, const char* name, const std::string& prefix, Listing& l) {
  std::string path = prefix + name;
  struct stat st {};
  if (path.find('\n') != std::string::npos || ++l.entries > kMaxListed ||
      ::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
    l.bad = true;
    return;
  }
  bool is_dir = S_ISDIR(st.st_mode), changed = after(st.st_mtim, l.ref);
  char head[96];
  std::snprintf(head, sizeof head, "%c %c %llu %lld.%09ld %o ", changed ? 'n' : 'o',
                is_dir ? 'd' : 'f', static_cast<unsigned long long>(st.st_size),
                static_cast<long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec,
                static_cast<unsigned>(st.st_mode & 07777));
  l.lines += head;
  l.lines += path;
  l.lines += '\n';
  // (a listing whose base64 would not fit in the answer: stopped here, and with it what each
  // level of a deep tree of long names holds)
  if (l.lines.size() / 3 * 4 > kMaxAnswer) {
    l.bad = true;
    return;
  }
  if (is_dir) {
    int sub = ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      l.bad = true;
      return;
    }
    walk(sub, path + "/", l);  // (closes it)
    return;
  }
  if (!changed) return;
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (l.data.size() == kMaxInlineFiles || (l.inline_bytes += size) > kMaxInlineBytes) {
    l.bad = true;
    return;
  }
  l.data.emplace_back();
  if (!read_file(dir, name, size, l.data.back())) l.bad = true;
}

void walk(int dir, const std::string& prefix, Listing& l) {
  DIR* d = ::fdopendir(dir);
  if (!d) {
    ::close(dir);
    l.bad = true;
    return;
  }
  // Names first, those a sync copies (the others are pruned: what is inside is not looked at
  // either): more than can be listed in all is known before any is looked at. (A dir stays
  // open while its subdirs are walked: a tree deeper than the fds this process may open is
  // an open that fails, which asks for an rsync.)
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0 ||
        excluded(e->d_name))
      continue;
    names.emplace_back(e->d_name);
    if (l.entries + names.size() > kMaxListed) break;
  }
  if (errno != 0 || l.entries + names.size() > kMaxListed) l.bad = true;
  for (const auto& n : names) {
    if (l.bad) break;
    entry(::dirfd(d), n.c_str(), prefix, l);
  }
  ::closedir(d);
}

}  // namespace

std::string dir_changes(const std::string& dir) {
  int root = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return "";
  Listing l;
  struct stat mark {};
  if (::fstatat(root, ".tune_sync_mark", &mark, AT_SYMLINK_NOFOLLOW) == 0) l.ref = mark.st_mtim;
  // The next sync's mark, made before the look: what changes after it is seen next time.
  (void)::unlinkat(root, ".tune_sync_mark.tmp", 0);
  int fd = ::openat(root, ".tune_sync_mark.tmp",
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd >= 0) ::close(fd);
  int walked = ::dup(root);
  if (walked >= 0)
    walk(walked, "", l);
  else
    l.bad = true;
  (void)::renameat(root, ".tune_sync_mark.tmp", root, ".tune_sync_mark");
  ::close(root);
  if (l.bad) return "rsync\n";
  if (l.lines.empty()) return "unchanged\n";
  std::string out = "files\n";
  util::base64_encode(l.lines, out);
  out += '\n';
  for (const auto& d : l.data) {
    out += "F\n";
    util::base64_encode(d, out);
    out += '\n';
    if (out.size() > kMaxAnswer) return "rsync\n";
  }
  return out.size() > kMaxAnswer ? "rsync\n" : out;
}

}  // namespace tune::agent
