#include "cli/common.hpp"

#include <fcntl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <tuple>

#include "spec/parse.hpp"
#include "ui/live_table.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/strings.hpp"

#ifndef TUNE_SOURCE_HELPERS_DIR
#define TUNE_SOURCE_HELPERS_DIR ""
#endif

namespace tune::cli {

fs::path resolve_experiment(const std::string& arg, const std::optional<std::string>& storage) {
  fs::path root =
      storage ? fs::absolute(util::expand_user(*storage)) : spec::default_storage_path();
  std::error_code ec;
  if (!arg.empty()) {
    fs::path p = util::expand_user(arg);
    if (fs::exists(p / state::kStateFile, ec)) return fs::absolute(p).lexically_normal();
    if (p.is_relative() && p.has_filename() && fs::exists(root / p / state::kStateFile, ec))
      return root / p;
    throw Fatal("no experiment '" + arg + "': neither a directory holding " + state::kStateFile +
                " nor a name under '" + root.string() + "'");
  }
  fs::path newest;
  fs::file_time_type newest_t{};
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    fs::path st = it->path() / state::kStateFile;
    auto t = fs::last_write_time(st, ec);
    if (ec) {
      ec.clear();
      continue;
    }
    if (newest.empty() || t > newest_t) newest = it->path(), newest_t = t;
  }
  if (newest.empty())
    throw Fatal("no experiments under '" + root.string() + "' (name one, or pass --storage-path)");
  return newest;
}

void add_experiment_options(CLI::App& app, std::string& experiment,
                            std::optional<std::string>& storage) {
  app.add_option("experiment", experiment, "experiment dir or name (default: the latest)");
  app.add_option("--storage-path", storage, "root of experiment dirs");
}

state::ExperimentState load_state_or_throw(const fs::path& dir) {
  auto s = state::load(dir);
  if (!s) throw Fatal(s.error(), kExitUsage);
  return std::move(*s);
}

namespace {
// "pid host" as the lock holder wrote it.
std::pair<std::string, std::string> lock_holder(const fs::path& lock) {
  auto holder = util::read_file(lock, 4096).value_or("");
  holder = holder.substr(0, holder.find('\n'));  // (the first line: what the holder wrote)
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  size_t sp = holder.find(' ');
  std::string pid = util::printable(holder.substr(0, sp), 20);
  std::string host = sp == std::string::npos ? "?" : util::printable(holder.substr(sp + 1), 100);
  return {pid.empty() ? "?" : pid, host};
}
}  // namespace

DriverInfo probe_driver(const fs::path& exp_dir) {
  fs::path lock = exp_dir / ".tune" / "lock";
  DriverInfo d;
  std::tie(d.pid, d.host) = lock_holder(lock);
  int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return d;
  // A driver holds an exclusive flock until it exits (the kernel drops it on a crash).
  d.alive = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return d;
}

std::string resume_command(const fs::path& exp_dir) {
  fs::path file = exp_dir / "experiment.yaml";
  std::vector<std::string> sets;
  std::error_code ec;
  if (auto text = util::read_file(exp_dir / ".tune" / kStartedAsFile, 1u << 20)) {
    auto j = util::parse_json_ext(*text);
    if (j.is_object() && j.contains("experiment_file") && j["experiment_file"].is_string() &&
        fs::is_regular_file(j["experiment_file"].get<std::string>(), ec))
      file = j["experiment_file"].get<std::string>();
    if (j.is_object() && j.contains("set") && j["set"].is_array())
      for (const auto& v : j["set"])
        if (v.is_string()) sets.push_back(v.get<std::string>());
  }
  std::string cmd = "tune run " + util::shell_quote(file.string()) + " --resume=auto";
  for (const auto& v : sets) cmd += " --set " + util::shell_quote(v);
  // Does the file (with those values) lead back here by itself?
  auto exp = spec::load_experiment(file, spec::Overrides{sets, {}, {}, {}});
  if (!exp || fs::weakly_canonical(exp->dir(), ec) != fs::weakly_canonical(exp_dir, ec))
    cmd += " --name " + util::shell_quote(exp_dir.filename().string()) + " --storage-path " +
           util::shell_quote(exp_dir.parent_path().string());
  return cmd;
}

void acquire_lock(const fs::path& exp_dir) {
  fs::path dir = exp_dir / ".tune";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Fatal("cannot create '" + dir.string() + "': " + ec.message());
  fs::path lock = dir / "lock";
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Fatal("cannot open lock '" + lock.string() + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    auto [pid, host] = lock_holder(lock);
    for (int i = 0; i < 20 && pid == "?"; ++i) {  // the holder is writing its name: a moment
      ::usleep(10'000);
      std::tie(pid, host) = lock_holder(lock);
    }
    throw Fatal("experiment '" + exp_dir.string() + "' is already being run by pid " + pid +
                " on host " + host + " (one driver per experiment)");
  }
  std::string me = std::to_string(::getpid()) + " " + util::host_name() + "\n";
  // (written over the old name, then cut to length: a reader never finds the file empty)
  if (::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()) ||
      ::ftruncate(fd, static_cast<off_t>(me.size())) != 0)
    spdlog::warn("cannot record the lock holder in '{}'", lock.string());
  // The descriptor stays open (and locked) until the process exits: a crashed driver's lock is
  // released by the kernel, so a stale lock can always be taken over.
}

void setup_logging(const fs::path& exp_dir, bool quiet, bool verbose, ui::LiveTable* table,
                   bool color) {
  std::vector<spdlog::sink_ptr> sinks;
  auto err_sink = ui::make_stderr_sink(table, color);
  err_sink->set_level(verbose ? spdlog::level::debug
                      : quiet ? spdlog::level::err
                              : spdlog::level::warn);
  err_sink->set_pattern(verbose ? "%H:%M:%S.%e [%P] %l: %v" : "tune: %l: %v");
  sinks.push_back(err_sink);
  if (!exp_dir.empty()) {
    try {
      auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(
          (exp_dir / "tune.log").string(), false);
      file_sink->set_level(verbose ? spdlog::level::debug : spdlog::level::info);
      file_sink->set_pattern("%Y-%m-%d %H:%M:%S.%e [%P] %l: %v");
      sinks.push_back(file_sink);
    } catch (const spdlog::spdlog_ex& e) {
      throw Fatal("cannot open '" + (exp_dir / "tune.log").string() + "': " + e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("tune", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::debug);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

std::string python_helpers_dir() {
  if (const char* e = std::getenv("TUNE_HELPERS_DIR"); e && *e) return e;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path installed = self.parent_path().parent_path() / "share" / "tune" / "python";
    if (fs::exists(installed / "tune_trial.py", ec)) return installed.string();
  }
  fs::path src = fs::path(TUNE_SOURCE_HELPERS_DIR) / "python";
  if (fs::exists(src / "tune_trial.py", ec)) return src.string();
  return "";
}

}  // namespace tune::cli
