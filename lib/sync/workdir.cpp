#include "sync/workdir.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "util/strings.hpp"

namespace tune::sync {

namespace {

std::string size_text(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

// FNV-1a, 64 bits: a stamp, not a security check.
void mix(uint64_t& h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull;
}

}  // namespace

Result<WorkdirPlan> plan_workdir(const fs::path& workdir, const fs::path& storage,
                                 const std::vector<HostStorage>& hosts,
                                 const std::string& experiment) {
  WorkdirPlan p;
  p.workdir = workdir;
  std::error_code ec;
  fs::path root = fs::weakly_canonical(workdir, ec);
  if (ec) return fail("trial.workdir '", workdir.string(), "': ", ec.message());
  // Storage paths inside the workdir are left out: the head's (results, not code), and a
  // host's where the host shares this filesystem (NFS, the same machine), which the copy
  // would otherwise copy into itself, growing with every copy. A storage path that IS the
  // workdir cannot be left out whole: its experiment dir (where the copy goes) is.
  std::vector<fs::path> stores;  // relative to the workdir
  auto leave_out = [&](const fs::path& path, const std::string& why) {
    if (!path.is_absolute()) return;  // (a host's "~/..." or relative path: not the head's)
    std::error_code e;
    fs::path store = fs::weakly_canonical(path, e);
    if (e) return;
    auto rel = store.lexically_relative(root);
    if (rel == "." && !experiment.empty()) rel = experiment;
    if (rel.empty() || *rel.begin() == ".." || rel == ".") return;
    if (std::find(stores.begin(), stores.end(), rel) != stores.end()) return;
    stores.push_back(rel);
    p.excludes.push_back("/" + rel.generic_string());
    p.left_out.push_back(rel.generic_string() + " (" + why + ")");
  };
  leave_out(fs::absolute(storage, ec), "the storage path");
  size_t named = 0, more = 0;  // a few hosts by name; with many, the log says how many more
  for (const auto& h : hosts) {
    size_t before = stores.size();
    leave_out(h.storage_path, "host " + h.host + "'s storage path");
    if (stores.size() > before && ++named > 3) {
      p.left_out.pop_back();
      ++more;
    }
  }
  if (more) p.left_out.push_back("the storage paths of " + std::to_string(more) + " more hosts");
  std::vector<std::string> entries;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) return fail("trial.workdir '", workdir.string(), "': ", ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return fail("trial.workdir '", workdir.string(), "': ", ec.message());
    fs::path rel = it->path().lexically_relative(root);
    std::string name = rel.generic_string();
    if (it.depth() == 0 && rel == ".git") {
      p.excludes.push_back("/.git");
      p.left_out.push_back(".git");
      it.disable_recursion_pending();
      continue;
    }
    if (std::find(stores.begin(), stores.end(), rel) != stores.end()) {
      it.disable_recursion_pending();
      continue;
    }
    auto st = it->symlink_status(ec);
    if (ec) continue;
    uint64_t size = 0;
    if (fs::is_regular_file(st)) {
      size = it->file_size(ec);
      if (ec) size = 0;
      if (size > kMaxWorkdirFile) {
        p.excludes.push_back("/" + name);
        p.left_out.push_back(name + " (" + size_text(size) + ")");
        continue;
      }
    }
    auto mtime = fs::last_write_time(it->path(), ec);  // (of the link's target: a change there
    if (ec) mtime = {};                                //  shows too)
    entries.push_back(name + '\0' + std::to_string(size) + '\0' +
                      std::to_string(mtime.time_since_epoch().count()));
    p.files += !fs::is_directory(st);
    p.bytes += size;
    if (p.files > kMaxWorkdirFiles || p.bytes > kMaxWorkdirBytes)
      return fail("trial.workdir '", workdir.string(), "' holds more than ",
                  p.files > kMaxWorkdirFiles ? std::to_string(kMaxWorkdirFiles) + " files"
                                             : size_text(kMaxWorkdirBytes),
                  " to copy to each host: point trial.workdir at the code, or set "
                  "trial.sync_workdir: false");
  }
  std::sort(entries.begin(), entries.end());
  std::sort(p.left_out.begin(), p.left_out.end());  // (the walk's order is the filesystem's)
  uint64_t h = 14695981039346656037ull;
  for (const auto& e : entries) mix(h, e);
  for (const auto& x : p.excludes) mix(h, x);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  p.stamp = buf;
  return p;
}

}  // namespace tune::sync
