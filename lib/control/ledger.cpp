#include "control/ledger.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/process.hpp"

namespace tune::control {

using json = nlohmann::json;

namespace {

constexpr const char* kLedgerFile = "ledger.json";
constexpr size_t kMaxLedgerBytes = 16u << 20;

std::optional<LedgerEntry> entry_from_json(const json& j) {
  if (!j.is_object()) return std::nullopt;
  try {
    LedgerEntry e;
    // (integers only: nlohmann casts a float to an integer type, undefined for 1e300)
    const json &pid = j.at("pid"), &start = j.at("start");
    if (!pid.is_number_integer() || !start.is_number_unsigned()) return std::nullopt;
    if (pid.get<int64_t>() <= 0 || pid.get<int64_t>() > INT32_MAX) return std::nullopt;
    e.pid = static_cast<pid_t>(pid.get<int64_t>());
    e.start_ticks = start.get<uint64_t>();
    e.exp_dir = j.at("exp").get<std::string>();
    e.cpus = j.at("cpus").get<double>();
    for (auto it = j.at("gpus").begin(); it != j.at("gpus").end(); ++it)
      e.gpus[std::stoi(it.key())] = it->get<double>();
    e.waiting_until = j.value("waiting_until", 0.0);
    if (e.pid <= 0 || !(e.cpus >= 0)) return std::nullopt;
    return e;
  } catch (const std::exception&) {
    return std::nullopt;  // a foreign or mangled line counts for nothing
  }
}

json entry_to_json(const LedgerEntry& e) {
  json gpus = json::object();
  for (const auto& [g, f] : e.gpus) gpus[std::to_string(g)] = f;
  return {{"pid", e.pid},   {"start", e.start_ticks}, {"exp", e.exp_dir},
          {"cpus", e.cpus}, {"gpus", gpus},           {"waiting_until", e.waiting_until}};
}

bool alive(const LedgerEntry& e) {
  return util::process_start_ticks(e.pid) == e.start_ticks;
}

// The whole file behind `fd` (at most kMaxLedgerBytes).
std::string read_all(int fd) {
  std::string text;
  char buf[65536];
  for (off_t at = 0; text.size() < kMaxLedgerBytes;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

// Every live entry in the ledger's text, the first line of each driver only (unreadable lines
// count for nothing). With `self`, the lines of that driver (pid and start time) are skipped
// unread: a driver never asks /proc whether it lives.
std::vector<LedgerEntry> live_entries(const std::string& text, const LedgerEntry* self = nullptr) {
  std::vector<LedgerEntry> out;
  std::set<pid_t> seen;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    auto e =
        entry_from_json(util::parse_json_ext(std::string_view(text).substr(start, nl - start)));
    if (e && self && e->pid == self->pid && e->start_ticks == self->start_ticks) e.reset();
    if (e && !seen.contains(e->pid) && alive(*e)) {
      seen.insert(e->pid);
      out.push_back(std::move(*e));
    }
    start = nl + 1;
  }
  return out;
}

void lock(int fd, int how) {
  while (::flock(fd, how) != 0 && errno == EINTR) {
  }
}

}  // namespace

fs::path Ledger::default_dir() {
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x == '/') return fs::path(x) / "tune";
  return fs::path("/tmp") / ("tune-" + std::to_string(::getuid()));
}

Result<std::unique_ptr<Ledger>> Ledger::open(const fs::path& dir, const fs::path& exp_dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return fail("cannot create the resource ledger dir '", dir.string(),
                "': ", std::strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() ||
      (st.st_mode & 022) != 0)
    return fail("resource ledger dir '", dir.string(), "' is not a private directory of this user");
  std::unique_ptr<Ledger> l(new Ledger());
  l->dir_ = dir;
  l->fd_ = ::open((dir / kLedgerFile).c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (l->fd_ < 0)
    return fail("cannot open '", (dir / kLedgerFile).string(), "': ", std::strerror(errno));
  l->mine_.pid = ::getpid();
  l->mine_.start_ticks = util::process_start_ticks(::getpid());
  l->mine_.exp_dir = exp_dir.string();
  return l;
}

std::vector<LedgerEntry> Ledger::read_live(const fs::path& dir) {
  int fd = ::open((dir / kLedgerFile).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {};
  lock(fd, LOCK_SH);
  auto entries = live_entries(read_all(fd));
  ::close(fd);
  return entries;
}

Ledger::~Ledger() {
  if (fd_ < 0) return;
  // Leave the ledger: an entry that holds nothing and waits for nothing is not written.
  (void)transact([](const std::vector<LedgerEntry>&, LedgerEntry& mine) {
    mine.cpus = 0;
    mine.gpus.clear();
    mine.waiting_until = 0;
    return true;
  });
  ::close(fd_);
}

Result<bool> Ledger::transact(
    const std::function<bool(const std::vector<LedgerEntry>& others, LedgerEntry& mine)>& decide) {
  lock(fd_, LOCK_EX);
  std::vector<LedgerEntry> others;
  for (auto& e : live_entries(read_all(fd_), &mine_))
    if (e.pid != mine_.pid) others.push_back(std::move(e));
  LedgerEntry mine = mine_;
  bool decided = decide(others, mine);
  mine.pid = mine_.pid;
  mine.start_ticks = mine_.start_ticks;
  mine.exp_dir = mine_.exp_dir;
  mine_ = mine;
  std::string text;
  for (const auto& e : others)
    text += entry_to_json(e).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (mine.holds_anything() || mine.waiting_until > 0)
    text += entry_to_json(mine).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  // Rewritten in place under the lock (no new file per trial start: that costs more than the
  // rest of a launch on some disks). Content first, then the length: a crash in between leaves
  // stale lines after the new ones, which count for nothing (a dead driver, or a driver's
  // second line) or too much (never too little) until the next write drops them. Not fsync'ed: it
  // describes running processes.
  ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
  bool ok = n == static_cast<ssize_t>(text.size()) &&
            ::ftruncate(fd_, static_cast<off_t>(text.size())) == 0;
  int err = errno;
  lock(fd_, LOCK_UN);
  if (!ok)
    return fail(
        "cannot write '", (dir_ / kLedgerFile).string(), "': ",
        n >= 0 && n < static_cast<ssize_t>(text.size()) ? "short write" : std::strerror(err));
  return decided;
}

}  // namespace tune::control
