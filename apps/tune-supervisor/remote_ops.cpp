// tune-supervisor's file operations on worker hosts (--adopt, --rm): the driver never builds
// shell commands out of trial output, so these checks run on the host itself, the same as
// checkpoint::adopt and util::remove_tree_nofollow on the head.
#include "remote_ops.hpp"

#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

// --adopt TRIAL_DIR REPORTED DEST / --rm DIR NAME. Prints one line on failure, exits 1.
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
    if (::rename(real, target.c_str()) != 0)
      return failed("cannot move checkpoint '" + reported +
                    "' into the trial dir: " + std::strerror(errno));
    return 0;
  }
  return failed("usage: tune-supervisor --adopt TRIAL_DIR REPORTED DEST | --rm DIR NAME");
}
