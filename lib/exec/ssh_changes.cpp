#include "exec/ssh_changes.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "util/base64.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

// find's test that skips (prunes) what a sync never copies.
std::string pruned() {
  std::string expr = "\\(";
  for (const char* x : kSyncExcludes)
    expr += std::string(expr.size() > 2 ? " -o" : "") + " -name " + util::shell_quote(x);
  return expr + " \\) -prune -o";
}

// The next line of `s` from `at` (moved past it); nullopt at the end.
std::optional<std::string_view> next_line(std::string_view s, size_t& at) {
  if (at >= s.size()) return std::nullopt;
  size_t nl = s.find('\n', at);
  if (nl == std::string_view::npos) return std::nullopt;  // (a line cut short: not taken)
  std::string_view line = s.substr(at, nl - at);
  at = nl + 1;
  return line;
}

// The next space-separated word of `line` (moved past it and the space).
std::string_view word(std::string_view& line) {
  size_t sp = line.find(' ');
  std::string_view w = line.substr(0, sp);
  line = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
  return w;
}

template <typename T>
bool number(std::string_view s, T& out, int base = 10) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

// find's %T@ ("1764237600.1234567890"): seconds, and the fraction to nanoseconds.
bool mtime_of(std::string_view s, timespec& out) {
  size_t dot = s.find('.');
  long long sec = 0;
  if (!number(s.substr(0, dot), sec)) return false;
  long ns = 0;
  if (dot != std::string_view::npos) {
    std::string_view frac = s.substr(dot + 1);
    if (frac.empty() || frac.find_first_not_of("0123456789") != std::string_view::npos)
      return false;
    for (size_t i = 0; i < 9; ++i) ns = ns * 10 + (i < frac.size() ? frac[i] - '0' : 0);
  }
  out.tv_sec = static_cast<time_t>(sec);
  out.tv_nsec = ns;
  return true;
}

// A relative path of plain names: none empty, "." or "..", and none that a sync never copies
// (a host must not write the head's result.json, or into a checkpoint there) or that the head
// copies through (.sync_*: staging; .tune_in.*: write_one's).
bool plain_relative(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.find('\0') != std::string_view::npos) return false;
  for (size_t at = 0; at <= p.size();) {
    size_t slash = std::min(p.find('/', at), p.size());
    std::string c(p.substr(at, slash - at));
    if (c.empty() || c == "." || c == ".." || c.starts_with(".sync_") || c.starts_with(".tune_in."))
      return false;
    for (const char* x : kSyncExcludes)
      if (::fnmatch(x, c.c_str(), 0) == 0) return false;
    at = slash + 1;
  }
  return true;
}

// The dir `path` names under `root` (all of it for a dir, else the file's), each part made
// where missing if `make` (with `mode` for the last of a dir) and entered without following a
// link; -1 with errno set if one cannot be. `name`: what is left (the file's name; "" for a
// dir).
int enter(int root, const ListedFile& f, std::string& name, bool make = true) {
  std::string_view p = f.path;
  int dir = ::dup(root);
  while (dir >= 0 && !p.empty()) {
    size_t slash = p.find('/');
    if (slash == std::string_view::npos && !f.dir) break;
    std::string c(p.substr(0, slash));
    p.remove_prefix(slash == std::string_view::npos ? p.size() : slash + 1);
    mode_t mode = p.empty() ? (f.mode & 0777) | 0700 : 0755;
    int sub = !make || ::mkdirat(dir, c.c_str(), mode) == 0 || errno == EEXIST
                  ? ::openat(dir, c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                  : -1;
    int e = errno;
    ::close(dir);
    errno = e;
    dir = sub;
  }
  name = std::string(p);
  return dir;
}

// Whether the head has `f` as the host listed it: a dir, or a regular file of its size and
// mtime (the test rsync makes before it copies a file).
bool on_head(int root, const ListedFile& f) {
  std::string name;
  int dir = enter(root, f, name, false);
  if (dir < 0) return false;
  struct stat st {};
  bool same =
      f.dir || (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == f.size &&
                st.st_mtim.tv_sec == f.mtime.tv_sec && st.st_mtim.tv_nsec == f.mtime.tv_nsec);
  ::close(dir);
  return same;
}

Result<void> write_one(int root, const ListedFile& f) {
  std::string name;
  int dir = enter(root, f, name);
  if (dir < 0) return fail("cannot make or enter a dir of ", f.path, ": ", std::strerror(errno));
  auto failed = [&](const std::string& what) -> Result<void> {
    int e = errno;
    ::close(dir);
    return fail(what, " ", f.path, ": ", std::strerror(e));
  };
  if (f.dir) {
    ::close(dir);
    return {};
  }
  std::string tmp = ".tune_in." + name;
  struct stat st {};
  bool there = ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
  mode_t mode = there ? st.st_mode & 07777 : f.mode & 0777;
  (void)::unlinkat(dir, tmp.c_str(), 0);
  int fd = ::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return failed("cannot write");
  bool ok = true;
  for (size_t done = 0; ok && done < f.data.size();) {
    ssize_t n = ::write(fd, f.data.data() + done, f.data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  const timespec times[2] = {{0, UTIME_OMIT}, f.mtime};
  ok = ok && (!there || ::fchmod(fd, mode) == 0) && ::futimens(fd, times) == 0;
  int e = errno;
  ok = ::close(fd) == 0 && ok;
  if (ok && ::renameat(dir, tmp.c_str(), dir, name.c_str()) == 0) {
    ::close(dir);
    return {};
  }
  if (ok) e = errno;
  (void)::unlinkat(dir, tmp.c_str(), 0);
  errno = e;
  return failed("cannot write");
}

}  // namespace

std::string changes_command(const std::string& dir, bool inline_files) {
  std::string cmd = "( cd -- " + util::shell_quote(dir) + " 2>/dev/null || exit 0; ";
  if (!inline_files)  // (whether anything changed: the first thing found says so)
    return cmd + "if [ -e .tune_sync_mark ] && [ -z \"$(find . " + pruned() +
           " -newer .tune_sync_mark -print -quit 2>/dev/null)\" ]; then echo unchanged; "
           "else touch .tune_sync_mark; echo rsync; fi )";
  // The next sync's mark is made before the look (what changes after it is seen next time).
  // Every entry is listed, "n" if changed since the last mark (all at the first sync) else
  // "o", then "TYPE SIZE MTIME MODE PATH" (x: a path that holds a newline); the listing goes
  // base64 (a name is never a line of the answer). If all are files and dirs, not too many,
  // and the changed files few and small, each of those is read as read_ranges() reads one
  // (nothing but a regular file, never a wait on a FIFO swapped in). Temporary files go in a
  // dir of the command's own.
  const std::string limits =
      "$1 == \"x\" || ($2 != \"f\" && $2 != \"d\") || ++n > " + std::to_string(kMaxListed) +
      " || ($1 == \"n\" && $2 == \"f\" && (++k > " + std::to_string(kMaxInlineFiles) +
      " || (s += $3) > " + std::to_string(kMaxInlineBytes) + "))";
  return cmd + "d=$(mktemp -d) || exit 0; nl=$(printf '\\n_'); nl=${nl%_}; " +
         "ref=.tune_sync_mark; [ -e \"$ref\" ] || { ref=\"$d/ref\"; touch -d @0 \"$ref\"; }; " +
         "rm -f .tune_sync_mark.tmp; touch .tune_sync_mark.tmp; " + "if find . " + pruned() +
         " ! -path . \\( -path \"*$nl*\" -printf 'x x 0 0 0 -\\n' -o -newer \"$ref\" " +
         "-printf 'n %y %s %T@ %m %P\\n' -o -printf 'o %y %s %T@ %m %P\\n' \\) " +
         "> \"$d/l\" 2>/dev/null; then r=0; else r=1; fi; " +
         "mv -f .tune_sync_mark.tmp .tune_sync_mark; " +
         "if [ $r != 0 ]; then echo rsync; elif [ ! -s \"$d/l\" ]; then echo unchanged; " +
         "elif ! awk '" + limits + " { bad = 1 } END { exit bad }' \"$d/l\"; then echo rsync; " +
         "else echo files; base64 -w0 < \"$d/l\"; echo; " +
         "while IFS= read -r e; do case $e in \"n f \"*) ;; *) continue;; esac; " +
         "p=${e#* }; p=${p#* }; p=${p#* }; p=${p#* }; p=${p#* }; " +
         "if [ -L \"$p\" ] || [ ! -f \"$p\" ]; then echo N; elif timeout 3 dd if=\"$p\" " +
         "of=\"$d/data\" iflag=count_bytes,nonblock bs=65536 count=" +
         std::to_string(kMaxInlineBytes + 1) +
         " status=none 2>/dev/null; then echo F; base64 -w0 < \"$d/data\"; echo; else echo E; " +
         "fi; done < \"$d/l\"; fi; rm -rf \"$d\" )";
}

Changes parse_changes(std::string_view answer) {
  Changes out;  // (kRsync)
  size_t at = 0;
  auto first = next_line(answer, at);
  if (first == "unchanged") out.kind = Changes::Kind::kUnchanged;
  if (first != "files") return out;
  auto b64 = next_line(answer, at);
  auto listing = b64 ? util::base64_decode(*b64) : std::nullopt;
  if (!listing) return out;
  std::vector<ListedFile> files;
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  size_t changed = 0, lat = 0;
  for (std::optional<std::string_view> line; (line = next_line(*listing, lat));) {
    std::string_view rest = *line;
    ListedFile f;
    uint64_t size = 0;
    std::string_view state = word(rest), type = word(rest);
    f.changed = state == "n";
    f.dir = type == "d";
    if ((state != "n" && state != "o") || (type != "f" && !f.dir) || !number(word(rest), size) ||
        !mtime_of(word(rest), f.mtime) || !number(word(rest), f.mode, 8) || f.mode > 07777 ||
        !plain_relative(rest) || files.size() == kMaxListed)
      return out;
    if (f.changed && !f.dir && (++changed > kMaxInlineFiles || (total += size) > kMaxInlineBytes))
      return out;
    f.path = std::string(rest);
    f.size = size;
    files.push_back(std::move(f));
  }
  if (lat != listing->size()) return out;  // (a last line cut short)
  for (auto& f : files) {
    if (!f.changed || f.dir) continue;  // (nothing read)
    auto status = next_line(answer, at);
    if (status != "F") return out;  // (gone, replaced or unreadable since it was listed)
    auto data_b64 = next_line(answer, at);
    auto data = data_b64 ? util::base64_decode(*data_b64) : std::nullopt;
    if (!data || data->size() != f.size) return out;  // (it changed meanwhile)
    f.data = std::move(*data);
  }
  if (files.empty()) return out;
  out.kind = Changes::Kind::kFiles;
  out.files = std::move(files);
  return out;
}

Result<void> write_changed_files(const fs::path& head_dir, const std::vector<ListedFile>& files) {
  int root = ::open(head_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0) return fail("cannot open ", head_dir.string(), ": ", std::strerror(errno));
  auto failed = [&](Result<void> r) {
    ::close(root);
    return r;
  };
  for (const auto& f : files) {
    if (!plain_relative(f.path)) return failed(fail("not a path inside the trial dir: ", f.path));
    // (one made before the last mark with an old mtime, or that an earlier sync missed)
    if (!f.changed && !on_head(root, f))
      return failed(fail(f.path, " is not on the head as the host has it"));
  }
  for (const auto& f : files)
    if (auto w = f.changed ? write_one(root, f) : Result<void>{}; !w) return failed(w);
  // The dirs' mtimes, once nothing more is written into them (those listed unchanged too: a
  // file written into one moved its mtime on the head).
  const timespec omit{0, UTIME_OMIT};
  for (const auto& f : files) {
    std::string name;
    int dir = f.dir ? enter(root, f, name, f.changed) : -1;
    const timespec times[2] = {omit, f.mtime};
    if (dir >= 0) (void)::futimens(dir, times);
    if (dir >= 0) ::close(dir);
  }
  ::close(root);
  return {};
}

}  // namespace tune::exec
