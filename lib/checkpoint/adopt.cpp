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

Result<void> adopt(const std::string& reported, const fs::path& cwd, const fs::path& trial_dir,
                   const std::string& dest_name) {
  std::string shown = util::printable(reported, 200);
  if (reported.empty()) return fail("checkpoint path is empty");
  if (reported.find('\0') != std::string::npos) return fail("checkpoint path contains a NUL byte");
  fs::path p = fs::path(reported).is_absolute() ? fs::path(reported) : cwd / reported;
  p = p.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return fail("checkpoint '", shown, "' does not exist");
  if (S_ISLNK(st.st_mode))
    return fail("checkpoint '", shown, "' is a symlink; report the directory itself");
  if (!S_ISDIR(st.st_mode)) return fail("checkpoint '", shown, "' is not a directory");
  std::error_code ec;
  fs::path real = fs::canonical(p, ec);
  if (ec) return fail("checkpoint '", shown, "': ", ec.message());
  fs::path trial_real = fs::canonical(trial_dir, ec);
  if (ec) return fail("trial dir '", trial_dir.string(), "': ", ec.message());
  bool in_trial = util::resolves_under(real, trial_real);
  bool in_tmp = util::resolves_under(real, temp_dir());
  if (!in_trial && !in_tmp)
    return fail("checkpoint '", shown, "' resolves to '", real.string(),
                "', outside the trial dir and the temp dir: refused");
  if (util::resolves_under(trial_real, real))
    return fail("checkpoint '", shown, "' is the trial dir or contains it: refused");
  if (in_tmp && real == fs::canonical(temp_dir(), ec))
    return fail("checkpoint '", shown, "' is the temp dir itself: refused");
  if (in_trial && real.parent_path() == trial_real &&
      real.filename().string().starts_with("checkpoint_"))
    return fail("checkpoint '", shown, "' is already a checkpoint of this trial");
  fs::path dest = trial_dir / dest_name;
  if (fs::symlink_status(dest, ec).type() != fs::file_type::not_found) {
    // A leftover of an attempt that crashed before its state was saved: replace it.
    if (auto r = util::remove_tree_nofollow(trial_dir, dest_name); !r) return r;
  }
  return util::move_dir(real, dest);
}

}  // namespace tune::checkpoint
