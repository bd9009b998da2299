#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tune::util {

namespace {
std::string errno_text() {
  return std::strerror(errno);
}

Result<void> fsync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail("cannot open directory '", dir.string(), "': ", errno_text());
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) return fail("cannot fsync directory '", dir.string(), "': ", std::strerror(saved));
  return {};
}
}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {}

AtomicFile::~AtomicFile() {
  discard();
}

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Result<void> AtomicFile::open() {
  discard();
  std::string tmpl = target_.string() + ".tmp.XXXXXX";
  int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return fail("cannot create '", tmpl, "': ", errno_text());
  fd_ = fd;
  temp_ = tmpl;
  return {};
}

Result<void> AtomicFile::write(std::string_view data) {
  if (fd_ < 0) return fail("internal: write to unopened '", target_.string(), "'");
  while (!data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      auto e = fail("cannot write '", temp_, "': ", n < 0 ? errno_text() : "short write");
      discard();
      return e;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<void> AtomicFile::commit(bool durable) {
  if (fd_ < 0) return fail("internal: commit of unopened '", target_.string(), "'");
  if (durable && ::fsync(fd_) != 0) {
    auto e = fail("cannot fsync '", temp_, "': ", errno_text());
    discard();
    return e;
  }
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    auto e = fail("cannot close '", temp_, "': ", errno_text());
    discard();
    return e;
  }
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    auto e = fail("cannot rename '", temp_, "' to '", target_.string(), "': ", errno_text());
    discard();
    return e;
  }
  temp_.clear();
  if (durable) return fsync_dir(target_.parent_path());
  return {};
}

Result<void> write_file_atomic(const std::filesystem::path& target, std::string_view content,
                               bool durable) {
  AtomicFile f(target);
  if (auto r = f.open(); !r) return r;
  if (auto r = f.write(content); !r) return r;
  return f.commit(durable);
}

}  // namespace tune::util
