#include "checkpoint/adopt.hpp"

#include <sys/stat.h>

#include <cstdlib>

#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::checkpoint {

fs::path temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return fs::path(t && *t ? t : "/tmp");
}

std::string partial_name(const std::string& dest_name) {
  return ".copying_" + dest_name;
}

namespace {

fs::path canonical_or_empty(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::canonical(p, ec);
  return ec ? fs::path() : r;
}

bool under(const fs::path& path, const fs::path& root) {
  return !root.empty() && util::resolves_under(path, root);
}

// Replaces whatever `dir/name` holds (a leftover of an attempt that crashed before its state
// was saved) without following a symlink.
Result<void> clear_dest(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  if (fs::symlink_status(dir / name, ec).type() == fs::file_type::not_found) return {};
  return util::remove_tree_nofollow(dir, name);
}

}  // namespace

Result<Source> locate(const std::string& reported, const Roots& roots) {
  std::string shown = util::printable(reported, 200);
  if (reported.empty()) return fail("checkpoint path is empty");
  if (reported.find('\0') != std::string::npos) return fail("checkpoint path contains a NUL byte");
  fs::path p = fs::path(reported).is_absolute() ? fs::path(reported) : roots.workdir / reported;
  p = p.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return fail("checkpoint '", shown, "' does not exist");
  if (S_ISLNK(st.st_mode))
    return fail("checkpoint '", shown, "' is a symlink; report the directory itself");
  if (!S_ISDIR(st.st_mode)) return fail("checkpoint '", shown, "' is not a directory");
  fs::path real = canonical_or_empty(p);
  if (real.empty()) return fail("checkpoint '", shown, "' cannot be resolved");
  fs::path trial = canonical_or_empty(roots.trial_dir);
  if (trial.empty()) return fail("trial dir '", roots.trial_dir.string(), "' is missing");
  fs::path exp = canonical_or_empty(roots.experiment_dir);
  fs::path tmp = canonical_or_empty(temp_dir());
  fs::path work = canonical_or_empty(roots.workdir);
  if (under(trial, real))
    return fail("checkpoint '", shown, "' is the trial dir or contains it: refused");
  if (under(real, trial)) {
    if (real.parent_path() == trial && real.filename().string().starts_with("checkpoint_"))
      return fail("checkpoint '", shown, "' is already a checkpoint of this trial");
    return Source{Source::How::kMove, real};
  }
  if (under(real, exp))
    return fail("checkpoint '", shown, "' resolves to '", real.string(),
                "', inside the experiment but not in this trial's dir: refused");
  if (under(exp, real))
    return fail("checkpoint '", shown, "' contains the experiment dir: refused");
  bool in_tmp = under(real, tmp), in_work = under(real, work);
  if ((in_tmp && real == tmp) || (in_work && real == work))
    return fail("checkpoint '", shown, "' is the ", real == tmp ? "temp dir" : "workdir",
                " itself: refused");
  if (in_tmp || in_work) return Source{Source::How::kCopy, real};
  return fail("checkpoint '", shown, "' resolves to '", real.string(),
              "', outside the trial dir, the temp dir and the workdir: refused");
}

Result<void> move_in(const Source& src, const fs::path& trial_dir, const std::string& dest_name) {
  if (auto r = clear_dest(trial_dir, dest_name); !r) return r;
  return util::move_dir(src.path, trial_dir / dest_name);
}

Result<void> copy_in(const Source& src, const fs::path& trial_dir, const std::string& dest_name,
                     const std::atomic<bool>& cancel) {
  std::string partial = partial_name(dest_name);
  if (auto r = clear_dest(trial_dir, partial); !r) return r;
  if (auto r = util::copy_dir(src.path, trial_dir / partial, cancel); !r) return r;
  if (auto r = clear_dest(trial_dir, dest_name); !r) return r;
  std::error_code ec;
  fs::rename(trial_dir / partial, trial_dir / dest_name, ec);
  if (ec) return fail("cannot rename '", (trial_dir / partial).string(), "': ", ec.message());
  return {};
}

Result<void> adopt(const std::string& reported, const fs::path& cwd, const fs::path& trial_dir,
                   const std::string& dest_name) {
  Roots roots{trial_dir, trial_dir.parent_path(), cwd};
  auto src = locate(reported, roots);
  if (!src) return std::unexpected(src.error());
  if (src->how == Source::How::kMove) return move_in(*src, trial_dir, dest_name);
  std::atomic<bool> never{false};
  return copy_in(*src, trial_dir, dest_name, never);
}

}  // namespace tune::checkpoint
