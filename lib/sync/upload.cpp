#include "sync/upload.hpp"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>

#include "util/atomic_file.hpp"
#include "util/clock.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::sync {

namespace {

enum class Kind { kS3, kGs, kFile, kTemplate };

using util::mono;

Kind kind_of(const spec::SyncConfig& cfg) {
  if (cfg.upload_syncer) return Kind::kTemplate;
  const std::string& u = *cfg.upload_dir;
  if (u.starts_with("s3://")) return Kind::kS3;
  if (u.starts_with("gs://")) return Kind::kGs;
  return Kind::kFile;
}

std::string remote_of(const spec::SyncConfig& cfg, const std::string& name) {
  std::string u = *cfg.upload_dir;
  while (u.size() > 8 && u.back() == '/') u.pop_back();
  return u + "/" + name;
}

// file:///a/b -> /a/b
std::string local_path(const std::string& url) {
  return url.substr(7);
}

// What is never mirrored: the driver's lock, lease and journal, FIFOs, unfinished checkpoints,
// atomic-write temp files, the uploader's own files, and the local-only dirs (kLocalOnlyDirs,
// which a download leaves behind too: an older mirror may hold them). rsync patterns
// (unanchored ones match at any depth) and aws globs (where * crosses '/').
const std::vector<std::string> kRsyncExcludes = {
    "/.tune/lock",           "/.tune/lease",         "/.tune/state.journal",
    "/.tune/upload/",        "/.tune/upload.log",    "stdin.fifo",
    ".pending_checkpoint_*", ".staged_checkpoint_*", "*.tmp.*",
    "/experiment_state.json"};
const std::vector<std::string> kAwsExcludes = {
    ".tune/lock",       ".tune/lease",          ".tune/state.journal",    ".tune/upload/*",
    ".tune/upload.log", "*stdin.fifo",          "*.pending_checkpoint_*", "*.staged_checkpoint_*",
    "*.tmp.*",          "experiment_state.json"};
const std::vector<std::string> kRsyncLocalOnly = {"/.tune/stop_requests/", "/.tune/callbacks/"};

constexpr int kDownloadAttempts = 3;  // each bounded by sync_timeout
const std::vector<std::string> kAwsLocalOnly = {".tune/stop_requests/*", ".tune/callbacks/*"};
const char* const kGsLocalOnly = R"(^\.tune/(stop_requests|callbacks)/.*$)";

std::vector<std::string> aws_base() {
  std::vector<std::string> cmd = {"aws"};
  // awscli 2.9 ignores AWS_ENDPOINT_URL; pass it on (S3-compatible stores: MinIO, s3rver, ...).
  if (const char* e = std::getenv("AWS_ENDPOINT_URL"); e && *e) {
    cmd.push_back("--endpoint-url");
    cmd.push_back(e);
  }
  return cmd;
}

// The gsutil -x regex for the excludes.
std::string gs_exclude_regex() {
  return R"((^|.*/)(stdin\.fifo|\.pending_checkpoint_[^/]*|\.staged_checkpoint_[^/]*|[^/]*\.tmp\.[^/]*)(/.*)?$|^\.tune/(lock|lease|state\.journal|upload.*)$|^\.tune/(stop_requests|callbacks)/.*$|^experiment_state\.json$)";
}

// Step 1 (the tree) and step 2 (the state snapshot) of a mirror.
std::vector<std::string> upload_command(Kind kind, const fs::path& exp, const std::string& remote,
                                        const spec::SyncConfig& cfg, int step) {
  fs::path snapshot = exp / ".tune" / "upload" / "experiment_state.json";
  std::vector<std::string> cmd;
  switch (kind) {
    case Kind::kFile:
      if (step == 1) {
        cmd = {"rsync", "-rlt", util::kRsyncExactTimes, "--delete", "--mkpath"};
        for (const auto& e : kRsyncExcludes) cmd.push_back("--exclude=" + e);
        for (const auto& e : kRsyncLocalOnly) cmd.push_back("--exclude=" + e);
        cmd.push_back(exp.string() + "/");
        cmd.push_back(local_path(remote) + "/");
      } else {
        // -I: always copied (the snapshot is small, and its quick check could match).
        cmd = {"rsync", "-tI", snapshot.string(), local_path(remote) + "/experiment_state.json"};
      }
      return cmd;
    case Kind::kS3:
      cmd = aws_base();
      if (step == 1) {
        for (const char* w : {"s3", "sync", "--delete", "--no-progress", "--only-show-errors"})
          cmd.push_back(w);
        for (const auto& e : kAwsExcludes) cmd.push_back("--exclude=" + e);
        for (const auto& e : kAwsLocalOnly) cmd.push_back("--exclude=" + e);
        cmd.push_back(exp.string());
        cmd.push_back(remote);
      } else {
        for (const char* w : {"s3", "cp", "--no-progress", "--only-show-errors"}) cmd.push_back(w);
        cmd.push_back(snapshot.string());
        cmd.push_back(remote + "/experiment_state.json");
      }
      return cmd;
    case Kind::kGs:
      if (step == 1)
        return {"gsutil",           "-m",         "-q",  "rsync", "-r", "-d", "-x",
                gs_exclude_regex(), exp.string(), remote};
      return {"gsutil", "-q", "cp", snapshot.string(), remote + "/experiment_state.json"};
    case Kind::kTemplate:
      return util::fill_template(*cfg.upload_syncer, exp.string() + "/", remote);
  }
  return cmd;
}

// True if a failed mirror step only met files deleted while it ran (checkpoints pruned
// meanwhile): the next mirror catches up, nothing to warn about.
bool only_vanished(Kind kind, int status, const fs::path& log) {
  if (kind == Kind::kFile) return status == util::kRsyncVanished;
  if (kind != Kind::kS3 || status != 1) return false;
  auto text = util::read_file(log, 16u << 20);
  if (!text || text->empty()) return false;
  size_t start = 0;
  while (start < text->size()) {
    size_t nl = text->find('\n', start);
    std::string_view line(text->data() + start,
                          (nl == std::string::npos ? text->size() : nl) - start);
    if (!line.empty() && line.find("No such file or directory") == std::string_view::npos)
      return false;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return true;
}

}  // namespace

bool is_local_only(const fs::path& rel) {
  auto it = rel.begin();
  if (it == rel.end() || *it != ".tune" || ++it == rel.end()) return false;
  return std::any_of(std::begin(kLocalOnlyDirs), std::end(kLocalOnlyDirs),
                     [&](const char* d) { return *it == fs::path(d).filename(); });
}

void drop_local_only(const fs::path& exp_dir) {
  for (const char* d : kLocalOnlyDirs) {
    std::error_code ec;
    fs::remove_all(exp_dir / d, ec);
    if (ec) spdlog::warn("cannot remove '{}': {}", (exp_dir / d).string(), ec.message());
  }
}

Uploader::Uploader(fs::path exp_dir, const std::string& name, const spec::SyncConfig& cfg)
    : exp_dir_(std::move(exp_dir)), remote_(remote_of(cfg, name)), cfg_(cfg) {}

Uploader::~Uploader() {
  cancel();
}

void Uploader::cancel() {
  if (pid_ > 0) util::kill_and_reap(pid_);
  pid_ = -1;
  step_ = 0;
  queued_ = false;
}

void Uploader::request(bool now) {
  double t = mono();
  // After a failure, wait a full period before trying again (unless asked at once).
  if (!now && t - last_start_ < cfg_.sync_period) return;
  queued_ = true;
  poll();
}

bool Uploader::start_step() {
  Kind kind = kind_of(cfg_);
  if (step_ == 1) {
    // The state as it is now is what step 2 uploads once the tree is there.
    std::error_code ec;
    fs::create_directories(exp_dir_ / ".tune" / "upload", ec);
    auto text = util::read_file(exp_dir_ / "experiment_state.json");
    if (!text || !util::write_file_atomic(exp_dir_ / ".tune" / "upload" / "experiment_state.json",
                                          *text, false)) {
      spdlog::warn("upload to {}: cannot snapshot the experiment state: skipped", remote_);
      return false;
    }
  }
  auto cmd = upload_command(kind, exp_dir_, remote_, cfg_, step_);
  auto pid = util::spawn_process(cmd, exp_dir_ / ".tune" / "upload.log");
  if (!pid) {
    spdlog::warn("upload to {}: {}", remote_, pid.error().message);
    return false;
  }
  spdlog::debug("upload to {}: step {}: {}", remote_, step_, cmd[0]);
  pid_ = *pid;
  return true;
}

bool Uploader::poll() {
  if (pid_ > 0) {
    auto status = util::try_wait(pid_);
    if (!status && mono() - started_ <= cfg_.sync_timeout) return true;
    if (!status) {                // a hung mirror (a stalled network, a stuck syncer)
      util::kill_and_reap(pid_);  // its whole process group
      pid_ = -1;
      step_ = 0;
      queued_ = false;  // the next request after a sync period starts it again
      ++failures_;
      spdlog::warn(
          "upload to {} ran longer than sync_timeout ({} s): killed; retried at the next "
          "sync period",
          remote_, util::format_double(cfg_.sync_timeout));
      return false;
    }
    pid_ = -1;
    fs::path log = exp_dir_ / ".tune" / "upload.log";
    if (*status != 0 && only_vanished(kind_of(cfg_), *status, log)) {
      spdlog::debug("upload to {}: files were deleted while it ran; mirroring again", remote_);
      queued_ = true;
      step_ = 0;
    } else if (*status != 0) {
      ++failures_;
      spdlog::warn("upload to {} failed (exit {}): {}{}", remote_, *status,
                   util::last_line(exp_dir_ / ".tune" / "upload.log"),
                   failures_ > 1 ? " (" + std::to_string(failures_) + " failures in a row)" : "");
      step_ = 0;
    } else if (step_ == 1 && kind_of(cfg_) != Kind::kTemplate) {
      step_ = 2;
      if (start_step()) return true;
      step_ = 0;
    } else {
      failures_ = 0;
      spdlog::debug("upload to {}: done in {:.2f} s", remote_, mono() - started_);
      step_ = 0;
    }
  }
  if (queued_ && pid_ <= 0) {
    queued_ = false;
    step_ = 1;
    last_start_ = started_ = mono();
    if (!start_step()) step_ = 0;
  }
  return busy();
}

Result<void> Uploader::check(const fs::path& exp_dir, const std::string& name,
                             const spec::SyncConfig& cfg) {
  if (!cfg.upload_dir || !cfg.upload_dir->starts_with("file://")) return {};
  std::error_code ec;
  fs::path remote = fs::weakly_canonical(local_path(remote_of(cfg, name)), ec);
  fs::path exp = fs::weakly_canonical(exp_dir, ec);
  auto under = [](const fs::path& p, const fs::path& root) {
    auto r = p.lexically_relative(root);
    return !r.empty() && *r.begin() != "..";
  };
  if (under(remote, exp) || under(exp, remote))
    return fail("sync_config.upload_dir '", *cfg.upload_dir, "' puts the mirror at '",
                remote.string(), "', which overlaps the experiment dir '", exp.string(),
                "': choose a directory outside it");
  return {};
}

Result<std::optional<bool>> Uploader::remote_has_state(const fs::path& exp_dir,
                                                       const std::string& name,
                                                       const spec::SyncConfig& cfg) {
  std::string remote = remote_of(cfg, name);
  fs::path log = exp_dir / ".tune" / "upload.log";
  std::vector<std::string> cmd;
  switch (kind_of(cfg)) {
    case Kind::kTemplate:
      return std::nullopt;
    case Kind::kFile: {
      std::error_code ec;
      return fs::exists(fs::path(local_path(remote)) / "experiment_state.json", ec);
    }
    case Kind::kS3:
      cmd = aws_base();
      for (const char* w : {"s3", "ls"}) cmd.push_back(w);
      cmd.push_back(remote + "/experiment_state.json");
      break;
    case Kind::kGs:
      cmd = {"gsutil", "-q", "stat", remote + "/experiment_state.json"};
      break;
  }
  std::error_code ec;
  fs::create_directories(log.parent_path(), ec);
  auto rc = util::run_process(cmd, log, cfg.sync_timeout);
  std::string why = util::last_line(log);
  fs::remove(log, ec);
  if (!rc)
    return fail("cannot look into upload_dir '", remote, "': ", rc.error().message,
                " (sync_config.sync_timeout)");
  if (*rc == 0) return std::optional<bool>(true);
  if (*rc == 1 && (why.empty() || kind_of(cfg) == Kind::kGs))
    return std::optional<bool>(false);  // not found
  return fail("cannot look into upload_dir '", remote, "' (", cmd[0], " exit ", std::to_string(*rc),
              "): ", why);
}

Result<void> Uploader::download(const fs::path& exp_dir, const std::string& name,
                                const spec::SyncConfig& cfg) {
  std::string remote = remote_of(cfg, name);
  std::error_code ec;
  fs::create_directories(exp_dir / ".tune", ec);
  if (ec) return fail("cannot create '", exp_dir.string(), "': ", ec.message());
  std::vector<std::string> cmd;
  switch (kind_of(cfg)) {
    case Kind::kFile:
      cmd = {"rsync", "-rlt", util::kRsyncExactTimes};
      for (const auto& e : kRsyncLocalOnly) cmd.push_back("--exclude=" + e);
      cmd.push_back(local_path(remote) + "/");
      cmd.push_back(exp_dir.string() + "/");
      break;
    case Kind::kS3:
      cmd = aws_base();
      for (const char* w : {"s3", "sync", "--no-progress", "--only-show-errors"}) cmd.push_back(w);
      for (const auto& e : kAwsLocalOnly) cmd.push_back("--exclude=" + e);
      cmd.push_back(remote);
      cmd.push_back(exp_dir.string());
      break;
    case Kind::kGs:
      cmd = {"gsutil", "-m", "-q", "rsync", "-r", "-x", kGsLocalOnly, remote, exp_dir.string()};
      break;
    case Kind::kTemplate:
      cmd = util::fill_template(*cfg.upload_syncer, remote + "/", exp_dir.string() + "/");
      break;
  }
  fs::path log = exp_dir / ".tune" / "upload.log";
  // A download that stalls (a dead network, a stuck server) is killed after sync_timeout and
  // tried again, as mirrors are; it never holds the run for ever.
  Result<int> rc = 0;
  for (int attempt = 1; attempt <= kDownloadAttempts; ++attempt) {
    rc = util::run_process(cmd, log, cfg.sync_timeout);
    if (rc || attempt == kDownloadAttempts) break;
    spdlog::warn("download from {}: {} (sync_config.sync_timeout); trying again ({} of {})", remote,
                 rc.error().message, attempt + 1, kDownloadAttempts);
  }
  if (!rc)
    return fail("cannot download the experiment from '", remote, "': ", rc.error().message,
                " (sync_config.sync_timeout), ", std::to_string(kDownloadAttempts), " times");
  if (*rc != 0)
    return fail("cannot download the experiment from '", remote, "' (", cmd[0], " exit ",
                std::to_string(*rc), "): ", util::last_line(log));
  drop_local_only(exp_dir);  // what a custom syncer (or an older mirror) brought anyway
  return {};
}

}  // namespace tune::sync
