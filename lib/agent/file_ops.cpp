// The file operations on a worker host's trial dirs (file_ops.hpp): the driver never builds
// shell commands out of trial output, so these checks run on the host itself, the same as
// checkpoint::adopt and util::remove_tree_nofollow on the head. A checkpoint is moved into the
// trial dir (renamed; copied and then removed where it was when the temp dir is on another
// filesystem).
#include "agent/file_ops.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "util/file_copy.hpp"

namespace {

// (an entry gone already is no failure: another deletion of the same tree may run beside this
// one, e.g. a driver's retry in the host's shell)
int rm_entry(const char* path, const struct stat*, int type, struct FTW*) {
  int r = type == FTW_DP || type == FTW_D ? ::rmdir(path) : ::unlink(path);
  return r != 0 && errno == ENOENT ? 0 : r;
}

// Deletes the tree at `path` (no symlink followed): "" or why not.
std::string remove_tree(const std::string& path) {
  if (::nftw(path.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
    return "cannot delete " + path + ": " + std::strerror(errno);
  return "";
}

bool plain_name(const char* name) {
  return *name && std::strchr(name, '/') == nullptr && std::strcmp(name, ".") != 0 &&
         std::strcmp(name, "..") != 0;
}

bool under(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          (root.back() == '/' || path[root.size()] == '/'));
}

// The tree being copied by move_tree (nftw's callback takes no context).
std::string g_from, g_to, g_error;

// One entry of the tree under g_from, made under g_to: a dir (its mode, and writable by its
// owner), a regular file (its bytes, fsynced; its mode), a symlink as a symlink (never
// followed); anything else is not part of a checkpoint. Stops the walk with g_error set.
int copy_entry(const char* path, const struct stat* st, int type, struct FTW*) {
  std::string to = g_to + (path + g_from.size());
  auto failed = [&](const char* what) {
    g_error = std::string(what) + " " + to + ": " + std::strerror(errno);
    return 1;
  };
  if (type == FTW_D)
    return ::mkdir(to.c_str(), (st->st_mode & 07777) | 0700) == 0 ? 0 : failed("cannot make");
  if (type == FTW_SL) {
    char target[PATH_MAX];
    ssize_t n = ::readlink(path, target, sizeof target - 1);
    if (n < 0) return failed("cannot read the link for");
    target[n] = '\0';
    return ::symlink(target, to.c_str()) == 0 ? 0 : failed("cannot make");
  }
  if (type != FTW_F) {
    if (type == FTW_DNR || type == FTW_NS) return failed("cannot read what becomes");
    return 0;
  }
  if (!S_ISREG(st->st_mode)) return 0;
  off_t size = 0;
  int in = tune::util::open_regular(path, size);
  if (in < 0) return failed("cannot read a regular file for");
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st->st_mode & 07777);
  if (out < 0) {
    ::close(in);
    return failed("cannot write");
  }
  int e = tune::util::copy_file_data(in, out, size);
  if (e == 0 && ::fsync(out) != 0) e = errno;
  ::close(in);
  if (::close(out) != 0 && e == 0) e = errno;
  errno = e;
  return e == 0 ? 0 : failed("cannot write");
}

// A checkpoint dir moved to `to` across filesystems: copied under TO.partial (each file
// fsynced), renamed to `to` when complete, then removed where it was. "" or why not.
std::string move_tree(const std::string& from, const std::string& to) {
  std::string partial = to + ".partial";
  ::nftw(partial.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);  // (a killed copy's)
  g_from = from, g_to = partial, g_error.clear();
  if (::nftw(from.c_str(), copy_entry, 16, FTW_PHYS) != 0 || !g_error.empty()) {
    std::string why =
        g_error.empty() ? "cannot copy " + from + ": " + std::strerror(errno) : g_error;
    ::nftw(partial.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return why;
  }
  if (::rename(partial.c_str(), to.c_str()) != 0)
    return "cannot rename " + partial + ": " + std::strerror(errno);
  // In place from here. The source is renamed before it is removed, so that a copy killed
  // while it removes it leaves it under another name, never half there for a second try of
  // the same request (adopted_already) to copy again over the complete one. (One that cannot
  // be removed all, or is being written, stays in the temp dir, which is the trial's to clean.)
  std::string moved = from + ".tune-moved";
  bool renamed = ::rename(from.c_str(), moved.c_str()) == 0;
  ::nftw((renamed ? moved : from).c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return "";
}

// How long a copy or a deletion may take (the driver's sync_timeout's default): a trial's
// tree that cannot be copied in that time is not a checkpoint this host should spend its disk
// on.
constexpr int kMaxWorkS = 1800;

// `work` in a child, while this process prints a newline every 2 s: whoever runs this (the
// driver's read of a shell, the host's agent) waits for output with a timeout, and a copy or a
// deletion of gigabytes takes longer. What `work` returns ("" or why not).
std::string keep_alive_while(const std::function<std::string()>& work) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return std::string("cannot make a pipe: ") + std::strerror(errno);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return std::string("cannot fork: ") + std::strerror(errno);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    // (ends with this process: work whose asker gave up, its shell closed or its agent ended,
    // must not go on beside the next try's)
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    std::string why = work();
    (void)!::write(pipe_fds[1], why.data(), why.size());
    ::_exit(why.empty() ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string why;
  for (int quiet = 0;;) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, 2000);
    if (n == 0 && ++quiet * 2 > kMaxWorkS) {
      ::kill(pid, SIGKILL);  // (a copy's DEST.partial goes at the next copy to DEST)
      why = "it took longer than " + std::to_string(kMaxWorkS) + " s: stopped";
      break;
    }
    if (n == 0) {
      std::fputc('\n', stdout);
      std::fflush(stdout);
      continue;
    }
    char buf[512];
    ssize_t got = n > 0 ? ::read(pipe_fds[0], buf, sizeof buf) : -1;
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    why.append(buf, static_cast<size_t>(got));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && why.empty()) return "";
  return why.empty() ? "it ended without finishing" : why;
}

}  // namespace

namespace tune::agent {

std::string remove_entry(const std::string& dir, const std::string& name) {
  if (!plain_name(name.c_str())) return "refused name '" + name + "'";
  std::string path = dir + "/" + name;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return errno == ENOENT ? "" : path + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode))
    return ::unlink(path.c_str()) == 0 ? "" : path + ": " + std::strerror(errno);
  return keep_alive_while([&] { return remove_tree(path); });
}

bool adopted_already(const std::string& dir, std::string reported, const std::string& dest) {
  if (!plain_name(dest.c_str()) || reported.empty()) return false;
  if (reported[0] != '/') reported = dir + "/" + reported;
  struct stat st {};
  return ::lstat((dir + "/" + dest).c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         ::lstat(reported.c_str(), &st) != 0 && errno == ENOENT;
}

std::string adopt_dir(const std::string& dir, std::string reported, const std::string& dest) {
  if (!plain_name(dest.c_str())) return "refused name '" + dest + "'";
  if (reported.empty()) return "checkpoint path is empty";
  if (reported[0] != '/') reported = dir + "/" + reported;
  while (reported.size() > 1 && reported.back() == '/') reported.pop_back();
  struct stat st {};
  if (::lstat(reported.c_str(), &st) != 0) return "checkpoint '" + reported + "' does not exist";
  if (S_ISLNK(st.st_mode))
    return "checkpoint '" + reported + "' is a symlink; report the directory itself";
  if (!S_ISDIR(st.st_mode)) return "checkpoint '" + reported + "' is not a directory";
  char real[PATH_MAX], trial[PATH_MAX];
  if (!::realpath(reported.c_str(), real) || !::realpath(dir.c_str(), trial))
    return "checkpoint '" + reported + "': " + std::strerror(errno);
  const char* tmp = std::getenv("TMPDIR");
  char tmp_real[PATH_MAX];
  if (!::realpath(tmp && *tmp ? tmp : "/tmp", tmp_real)) std::strcpy(tmp_real, "/tmp");
  bool in_trial = under(real, trial), in_tmp = under(real, tmp_real);
  if ((!in_trial && !in_tmp) || std::strcmp(real, tmp_real) == 0 || under(trial, real))
    return "checkpoint '" + reported + "' resolves to '" + real +
           "', outside the trial dir and the temp dir: refused";
  std::string target = std::string(trial) + "/" + dest;
  if (::lstat(target.c_str(), &st) == 0) {
    std::string why = S_ISDIR(st.st_mode) ? keep_alive_while([&] { return remove_tree(target); })
                                          : remove_tree(target);
    if (!why.empty()) return "cannot replace " + target + ": " + why;
  }
  if (::rename(real, target.c_str()) == 0) return "";
  if (errno != EXDEV)
    return "cannot move checkpoint '" + reported + "' into the trial dir: " + std::strerror(errno);
  // The temp dir on another filesystem (a tmpfs /tmp, a trial dir on NFS): copied, then
  // removed there.
  std::string error = keep_alive_while([&] { return move_tree(real, target); });
  return error.empty() ? ""
                       : "cannot move checkpoint '" + reported + "' into the trial dir: " + error;
}

}  // namespace tune::agent
