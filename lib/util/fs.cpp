#include "util/fs.hpp"

#include "util/file_copy.hpp"

#include <atomic>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tune::util {

namespace {
std::string errno_text() {
  return std::strerror(errno);
}
}  // namespace

bool is_regular_file_at(const fs::path& path) noexcept {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_file(const fs::path& path, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO without a writer would block; it is refused below instead.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail("cannot read '", path.string(), "': ", errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("cannot read '", path.string(), "': not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return fail("cannot read '", path.string(), "': larger than ", std::to_string(max_bytes),
                " bytes");
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      auto e = fail("cannot read '", path.string(), "': ", errno_text());
      ::close(fd);
      return e;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      return fail("cannot read '", path.string(), "': larger than ", std::to_string(max_bytes),
                  " bytes");
    }
  }
  ::close(fd);
  return out;
}

fs::path expand_user(std::string_view path) {
  if (path == "~" || path.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    std::string h = home ? home : "/";
    return fs::path(h + std::string(path.substr(1)));
  }
  return fs::path(path);
}

std::string safe_component(std::string_view s, size_t max_bytes) {
  std::string out;
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) ||
              std::string_view("._=,+-").find(c) != std::string_view::npos;
    out.push_back(ok ? c : '_');
  }
  if (out.size() > max_bytes) out.resize(max_bytes);
  if (out.empty() || out == "." || out == "..") out = "_";
  return out;
}

bool resolves_under(const fs::path& path, const fs::path& root) {
  std::error_code ec;
  fs::path p = fs::canonical(path, ec);
  if (ec) return false;
  fs::path r = fs::canonical(root, ec);
  if (ec) return false;
  auto [ri, pi] = std::mismatch(r.begin(), r.end(), p.begin(), p.end());
  return ri == r.end();
}

namespace {
// Removes everything inside the directory open at `dfd`, never following links.
Result<void> clear_dir_at(int dfd, const std::string& where) {
  int dup = ::dup(dfd);
  if (dup < 0) return fail("cannot read directory '", where, "': ", errno_text());
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return fail("cannot read directory '", where, "': ", errno_text());
  }
  Result<void> result;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st {};
    if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      int sub = ::openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0 && errno == ENOENT) continue;  // removed meanwhile by another deleter
      if (sub < 0) {
        result = fail("cannot open '", where, "/", n, "': ", errno_text());
        break;
      }
      auto r = clear_dir_at(sub, where + "/" + std::string(n));
      ::close(sub);
      if (!r) {
        result = r;
        break;
      }
      if (::unlinkat(dfd, e->d_name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        result = fail("cannot remove '", where, "/", n, "': ", errno_text());
        break;
      }
    } else if (::unlinkat(dfd, e->d_name, 0) != 0 && errno != ENOENT) {
      result = fail("cannot remove '", where, "/", n, "': ", errno_text());
      break;
    }
  }
  ::closedir(d);
  return result;
}
}  // namespace

Result<void> remove_tree_nofollow(const fs::path& dir, std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos)
    return fail("refusing to remove '", name, "' in '", dir.string(), "'");
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return fail("cannot open '", dir.string(), "': ", errno_text());
  std::string n(name);
  std::string where = (dir / n).string();
  struct stat st {};
  Result<void> result;
  if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT) result = fail("cannot stat '", where, "': ", errno_text());
  } else if (S_ISDIR(st.st_mode)) {
    // (ENOENT: another deleter of the same tree got there first, which is what was asked)
    int sub = ::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      if (errno != ENOENT) result = fail("cannot open '", where, "': ", errno_text());
    } else {
      result = clear_dir_at(sub, where);
      ::close(sub);
      if (result && ::unlinkat(dfd, n.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        result = fail("cannot remove '", where, "': ", errno_text());
    }
  } else if (::unlinkat(dfd, n.c_str(), 0) != 0 && errno != ENOENT) {
    result = fail("cannot remove '", where, "': ", errno_text());
  }
  ::close(dfd);
  return result;
}

namespace {
Result<void> copy_tree(const fs::path& src, const fs::path& dst,
                       const std::atomic<bool>* cancel = nullptr) {
  if (cancel && *cancel) return fail("cancelled");
  struct stat st {};
  if (::lstat(src.c_str(), &st) != 0)
    return fail("cannot stat '", src.string(), "': ", errno_text());
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    auto target = fs::read_symlink(src, ec);
    if (ec) return fail("cannot read link '", src.string(), "': ", ec.message());
    fs::create_symlink(target, dst, ec);
    if (ec) return fail("cannot create link '", dst.string(), "': ", ec.message());
    return {};
  }
  if (S_ISDIR(st.st_mode)) {
    if (::mkdir(dst.c_str(), st.st_mode & 07777) != 0)
      return fail("cannot create '", dst.string(), "': ", errno_text());
    std::error_code ec;
    for (auto it = fs::directory_iterator(src, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      if (auto r = copy_tree(it->path(), dst / it->path().filename(), cancel); !r) return r;
    }
    if (ec) return fail("cannot list '", src.string(), "': ", ec.message());
    return {};
  }
  if (!S_ISREG(st.st_mode)) return {};  // sockets, fifos: not part of a checkpoint
  off_t size = 0;
  int in = open_regular(src.c_str(), size);
  if (in < 0) return fail("cannot read '", src.string(), "': ", errno_text());
  int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
  if (out < 0) {
    ::close(in);
    return fail("cannot create '", dst.string(), "': ", errno_text());
  }
  // (holes stay holes: a trial's sparse file of a terabyte does not fill the disk)
  int e = copy_file_data(in, out, size);
  if (e == 0 && ::fsync(out) != 0) e = errno;
  ::close(in);
  if (::close(out) != 0 && e == 0) e = errno;
  Result<void> r;
  if (e != 0)
    r = fail("cannot copy '", src.string(), "' to '", dst.string(), "': ", std::strerror(e));
  return r;
}
}  // namespace

Result<void> move_dir(const fs::path& src, const fs::path& dst) {
  if (::rename(src.c_str(), dst.c_str()) == 0) return {};
  if (errno != EXDEV)
    return fail("cannot move '", src.string(), "' to '", dst.string(), "': ", errno_text());
  fs::path staging = dst.string() + ".partial";
  (void)remove_tree_nofollow(staging.parent_path(), staging.filename().string());
  if (auto r = copy_tree(src, staging); !r) {
    (void)remove_tree_nofollow(staging.parent_path(), staging.filename().string());
    return r;
  }
  if (::rename(staging.c_str(), dst.c_str()) != 0)
    return fail("cannot rename '", staging.string(), "': ", errno_text());
  return remove_tree_nofollow(src.parent_path(), src.filename().string());
}

Result<void> copy_dir(const fs::path& src, const fs::path& dst, const std::atomic<bool>& cancel) {
  auto r = copy_tree(src, dst, &cancel);
  if (!r) (void)remove_tree_nofollow(dst.parent_path(), dst.filename().string());
  return r;
}

uint64_t file_size_or_zero(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace tune::util
