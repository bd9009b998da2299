// `tune run --restore-from DIR|URI`: copies a quiet experiment (a directory, or an upload_dir
// mirror) to the new experiment dir, which the run then resumes.
#include "cli/restore_from.hpp"

#include <algorithm>
#include <iostream>
#include <optional>

#include "cli/common.hpp"
#include "exec/local_executor.hpp"
#include "state/state.hpp"
#include "sync/upload.hpp"
#include "ui/progress_bar.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::cli {

namespace {

bool left_out(const fs::path& rel) {
  return rel == ".tune/lock" || rel == ".tune/lease";
}

// The bytes of the regular files copy_tree would copy (0 if the walk fails: no bar then).
size_t tree_bytes(const fs::path& from) {
  std::error_code ec;
  size_t total = 0;
  for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    auto st = it->symlink_status(ec);
    fs::path rel = it->path().lexically_relative(from);
    if (ec || !fs::is_regular_file(st) || left_out(rel) || sync::is_local_only(rel)) continue;
    total += it->file_size(ec);
    if (ec) return 0;
  }
  return ec ? 0 : total;
}

}  // namespace

void copy_tree(const fs::path& from, const fs::path& to, const std::string& bar_label) {
  std::error_code ec;
  fs::create_directories(to, ec);
  std::optional<ui::ProgressBar> bar;
  size_t done = 0;
  if (!bar_label.empty())
    if (size_t total = tree_bytes(from); total > 0) {
      bar.emplace(bar_label, total, true);
      bar->count_bytes();
    }
  for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    fs::path rel = it->path().lexically_relative(from);
    if (left_out(rel)) continue;
    if (sync::is_local_only(rel)) {  // pending stop requests, callbacks' output: the source's
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    fs::path dest = to / rel;
    auto st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_directory(st)) {
      fs::create_directories(dest, ec);
    } else if (fs::is_symlink(st)) {
      fs::copy_symlink(it->path(), dest, ec);
    } else if (fs::is_regular_file(st)) {
      fs::copy_file(it->path(), dest, fs::copy_options::overwrite_existing, ec);
      if (bar && !ec) bar->update(done += fs::file_size(dest, ec));
    }
    if (ec) break;
  }
  if (bar) bar->finish();
  if (ec)
    throw Fatal("cannot copy '" + from.string() + "' to '" + to.string() + "': " + ec.message());
}

namespace {

// Refuses a source that a driver or detached trials still work in.
void check_quiet(const fs::path& src) {
  auto driver = probe_driver(src);
  if (driver.alive)
    throw Fatal("--restore-from: '" + src.string() + "' is being run by pid " + driver.pid +
                " on host " + driver.host + " (stop it first: tune stop " + src.string() + ")");
  auto live = exec::live_supervisors(src);
  if (!live.empty()) {
    std::vector<std::string> names;
    for (const auto& [key, pid] : live) names.push_back(key.substr(0, key.find('\0')));
    std::sort(names.begin(), names.end());
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Fatal("--restore-from: trials of '" + src.string() + "' still run detached (" + list +
                "); stop them first: tune stop " + src.string());
  }
}

}  // namespace

void restore_from(const std::string& source, const fs::path& dir, const spec::SyncConfig& sync,
                  bool bar) {
  bool uri =
      source.starts_with("s3://") || source.starts_with("gs://") || source.starts_with("file://");
  std::error_code ec;
  if (!uri) {
    fs::path src = fs::absolute(util::expand_user(source)).lexically_normal();
    if (!fs::exists(src / state::kStateFile, ec))
      throw Fatal("--restore-from: '" + source + "' holds no " + state::kStateFile);
    if (fs::weakly_canonical(src, ec) == fs::weakly_canonical(dir, ec))
      throw Fatal("--restore-from: '" + source +
                  "' is the experiment dir itself; give the copy a new --name");
    check_quiet(src);
    std::cerr << "tune: restoring '" << src.string() << "' into '" << dir.string() << "'\n";
    copy_tree(src, dir, bar ? "copying experiment" : "");
    return;
  }
  // A mirror: URI = <upload_dir>/<name>.
  std::string trimmed = source;
  while (trimmed.size() > 8 && trimmed.back() == '/') trimmed.pop_back();
  size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos || slash + 1 >= trimmed.size() || slash < 6)
    throw Fatal("--restore-from: '" + source + "' names no experiment (URI/NAME)");
  spec::SyncConfig s = sync;
  s.upload_dir = trimmed.substr(0, slash);
  std::string name = trimmed.substr(slash + 1);
  std::cerr << "tune: restoring '" << trimmed << "' into '" << dir.string() << "'\n";
  if (auto r = sync::Uploader::download(dir, name, s); !r)
    throw Fatal("--restore-from: " + r.error().message);
  if (!fs::exists(dir / state::kStateFile, ec))
    throw Fatal("--restore-from: '" + source + "' holds no " + state::kStateFile);
}

}  // namespace tune::cli
