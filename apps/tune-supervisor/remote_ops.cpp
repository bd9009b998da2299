// tune-supervisor's file operations on worker hosts (--adopt, --rm): the driver never builds
// shell commands out of trial output, so these checks run on the host itself, the same as
// checkpoint::adopt and util::remove_tree_nofollow on the head. A checkpoint is moved into the
// trial dir (renamed; copied and then removed where it was when the temp dir is on another
// filesystem).
#include "remote_ops.hpp"

#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/fs.hpp"

namespace {

int rm_entry(const char* path, const struct stat*, int type, struct FTW*) {
  return type == FTW_DP || type == FTW_D ? ::rmdir(path) : ::unlink(path);
}

bool plain_name(const char* name) {
  return *name && std::strchr(name, '/') == nullptr && std::strcmp(name, ".") != 0 &&
         std::strcmp(name, "..") != 0;
}

bool under(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          (root.back() == '/' || path[root.size()] == '/'));
}

// util::move_dir (a copy, each file fsynced, under DEST.partial, renamed when complete, then
// the source removed) in a child, while this process prints a newline every 2 s: the driver
// reads its answer with a timeout, and a copy of gigabytes takes longer. "" or why not.
std::string move_across(const char* from, const std::string& to) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return std::strerror(errno);
  pid_t pid = ::fork();
  if (pid < 0) return std::strerror(errno);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    auto moved = tune::util::move_dir(from, to);
    std::string why = moved ? "" : moved.error().message;
    (void)!::write(pipe_fds[1], why.data(), why.size());
    ::_exit(moved ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string why;
  for (;;) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, 2000);
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
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return why.empty() ? "the copy ended without finishing" : why;
}

}  // namespace

// --adopt TRIAL_DIR REPORTED DEST / --rm DIR NAME. Prints one line on failure, exits 1.
int remote_op(int argc, char** argv) {
  auto failed = [](const std::string& msg) {
    std::fprintf(stderr, "%s\n", msg.c_str());
    return 1;
  };
  if (std::strcmp(argv[1], "--rm") == 0 && argc == 4) {
    if (!plain_name(argv[3])) return failed(std::string("refused name '") + argv[3] + "'");
    std::string path = std::string(argv[2]) + "/" + argv[3];
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0)
      return errno == ENOENT ? 0 : failed(path + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode))
      return ::unlink(path.c_str()) == 0 ? 0 : failed(path + ": " + std::strerror(errno));
    if (::nftw(path.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
      return failed("cannot delete " + path + ": " + std::strerror(errno));
    return 0;
  }
  if (std::strcmp(argv[1], "--adopt") == 0 && argc == 5) {
    std::string dir = argv[2], reported = argv[3], dest = argv[4];
    if (!plain_name(dest.c_str())) return failed("refused name '" + dest + "'");
    if (reported.empty()) return failed("checkpoint path is empty");
    if (reported[0] != '/') reported = dir + "/" + reported;
    while (reported.size() > 1 && reported.back() == '/') reported.pop_back();
    struct stat st {};
    if (::lstat(reported.c_str(), &st) != 0)
      return failed("checkpoint '" + reported + "' does not exist");
    if (S_ISLNK(st.st_mode))
      return failed("checkpoint '" + reported + "' is a symlink; report the directory itself");
    if (!S_ISDIR(st.st_mode)) return failed("checkpoint '" + reported + "' is not a directory");
    char real[PATH_MAX], trial[PATH_MAX];
    if (!::realpath(reported.c_str(), real) || !::realpath(dir.c_str(), trial))
      return failed("checkpoint '" + reported + "': " + std::strerror(errno));
    const char* tmp = std::getenv("TMPDIR");
    char tmp_real[PATH_MAX];
    if (!::realpath(tmp && *tmp ? tmp : "/tmp", tmp_real)) std::strcpy(tmp_real, "/tmp");
    bool in_trial = under(real, trial), in_tmp = under(real, tmp_real);
    if ((!in_trial && !in_tmp) || std::strcmp(real, tmp_real) == 0 || under(trial, real))
      return failed("checkpoint '" + reported + "' resolves to '" + real +
                    "', outside the trial dir and the temp dir: refused");
    std::string target = std::string(trial) + "/" + dest;
    if (::lstat(target.c_str(), &st) == 0 &&
        ::nftw(target.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
      return failed("cannot replace " + target + ": " + std::strerror(errno));
    if (::rename(real, target.c_str()) == 0) return 0;
    if (errno != EXDEV)
      return failed("cannot move checkpoint '" + reported +
                    "' into the trial dir: " + std::strerror(errno));
    // The temp dir on another filesystem (a tmpfs /tmp, a trial dir on NFS): copied, then
    // removed there.
    std::string error = move_across(real, target);
    return error.empty()
               ? 0
               : failed("cannot move checkpoint '" + reported + "' into the trial dir: " + error);
  }
  return failed("usage: tune-supervisor --adopt TRIAL_DIR REPORTED DEST | --rm DIR NAME");
}
