#include "trial/result_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"

namespace tune::trial {

namespace {

Result<void> write_all(int fd, std::string_view data, const fs::path& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write '", what.string(), "': ", std::strerror(errno));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

void csv_cell(std::string& out, const json& v) {
  std::string text;
  // null, and NaN/Infinity (a diverged metric), are empty cells, as pandas writes NaN.
  if (v.is_null() || (v.is_number_float() && !std::isfinite(v.get<double>()))) return;
  if (v.is_string())
    text = v.get_ref<const std::string&>();
  else
    text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.find_first_of(",\"\n\r") == std::string::npos) {
    out += text;
    return;
  }
  out.push_back('"');
  for (char c : text) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
}

// Finds a flattened key ("a/b") in a result.
const json* find_flat(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it != obj.end()) return &*it;
  size_t slash = key.find('/');
  if (slash == std::string::npos) return nullptr;
  auto outer = obj.find(key.substr(0, slash));
  if (outer == obj.end() || !outer->is_object()) return nullptr;
  return find_flat(*outer, key.substr(slash + 1));
}

void csv_row(std::string& out, const std::vector<std::string>& columns, const json& row) {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) out.push_back(',');
    if (const json* v = find_flat(row, columns[i])) csv_cell(out, *v);
  }
  out.push_back('\n');
}

std::string csv_header(const std::vector<std::string>& columns) {
  std::string out;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) out.push_back(',');
    csv_cell(out, columns[i]);
  }
  out.push_back('\n');
  return out;
}

std::vector<std::string> parse_csv_header(const std::string& line) {
  std::vector<std::string> cols;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        cur.push_back('"'), ++i;
      else if (c == '"')
        quoted = false;
      else
        cur.push_back(c);
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cols.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  cols.push_back(std::move(cur));
  return cols;
}

}  // namespace

ResultLog::~ResultLog() {
  close();
}

Result<void> ResultLog::open(const fs::path& trial_dir) {
  close();
  dir_ = trial_dir;
  columns_.clear();
  known_.clear();
  last_row_.clear();
  last_json_buf_ = last_csv_buf_ = std::string::npos;
  last_json_file_ = last_csv_file_ = -1;
  // Keep the existing header, if progress.csv has one.
  if (auto text = util::read_file(dir_ / "progress.csv", 1ull << 40); text && !text->empty()) {
    auto nl = text->find('\n');
    if (nl != std::string::npos) columns_ = parse_csv_header(text->substr(0, nl));
    for (const auto& c : columns_) known_.insert(c);
  }
  json_fd_ =
      ::open((dir_ / "result.json").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (json_fd_ < 0)
    return fail("cannot open '", (dir_ / "result.json").string(), "': ", std::strerror(errno));
  csv_fd_ =
      ::open((dir_ / "progress.csv").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (csv_fd_ < 0)
    return fail("cannot open '", (dir_ / "progress.csv").string(), "': ", std::strerror(errno));
  return {};
}

void ResultLog::close() {
  if (json_fd_ >= 0 || sink_) (void)flush();
  sink_.reset();
  if (json_fd_ >= 0) ::close(json_fd_);
  if (csv_fd_ >= 0) ::close(csv_fd_);
  json_fd_ = csv_fd_ = -1;
}

void ResultLog::add_columns(const json& obj, const std::string& prefix, bool& added) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    std::string key = prefix.empty() ? it.key() : prefix + "/" + it.key();
    if (it->is_object() && !it->empty()) {
      add_columns(*it, key, added);
    } else if (!known_.contains(key)) {
      known_.insert(key);
      columns_.push_back(key);
      added = true;
    }
  }
}

void ResultLog::append(const json& result) {
  if (sink_) sink_->add(result);
  last_json_buf_ = json_buf_.size();
  util::dump_json_ext(result, json_buf_);  // NaN stays NaN, as in Ray's result.json
  last_row_.assign(json_buf_, last_json_buf_);
  json_buf_.push_back('\n');
  bool added = false;
  add_columns(result, "", added);
  if (added) csv_rewrite_ = true;
  last_csv_buf_ = csv_buf_.size();
  if (!csv_rewrite_) csv_row(csv_buf_, columns_, result);
}

Result<void> ResultLog::mark_last_done() {
  if (json_fd_ < 0 || last_row_.empty()) return flush();
  json row = util::parse_json_ext(last_row_);
  if (!row.is_object() || row.value("done", false) == true) return flush();
  row["done"] = true;
  std::string text = util::dump_json_ext(row);
  if (last_json_buf_ != std::string::npos) {
    json_buf_.resize(last_json_buf_);
  } else if (last_json_file_ >= 0) {
    if (auto r = flush(); !r) return r;
    if (::ftruncate(json_fd_, last_json_file_) != 0)
      return fail("cannot rewrite the last row of '", (dir_ / "result.json").string(),
                  "': ", std::strerror(errno));
  } else {
    return flush();
  }
  json_buf_ += text + "\n";
  if (!csv_rewrite_) {
    if (last_csv_buf_ != std::string::npos && last_csv_buf_ <= csv_buf_.size())
      csv_buf_.resize(last_csv_buf_);
    else if (last_csv_file_ < 0 || ::ftruncate(csv_fd_, last_csv_file_) != 0)
      csv_rewrite_ = true;  // regenerated from result.json
    if (!csv_rewrite_) csv_row(csv_buf_, columns_, row);
  }
  last_row_ = std::move(text);
  return flush();
}

Result<void> ResultLog::flush() {
  auto r = flush_files();
  if (sink_)
    if (auto s = sink_->flush(); r && !s) return s;
  return r;
}

Result<void> ResultLog::flush_files() {
  if (json_fd_ < 0) return {};
  if (!json_buf_.empty()) {
    off_t before = ::lseek(json_fd_, 0, SEEK_END);
    auto r = write_all(json_fd_, json_buf_, dir_ / "result.json");
    if (r && last_json_buf_ != std::string::npos && before >= 0) {
      last_json_file_ = before + static_cast<off_t>(last_json_buf_);
      last_json_buf_ = std::string::npos;
    }
    if (!r) {
      // Disk full or similar: take back any partial write and keep the rows for the next
      // flush, so result.json never holds a torn row and loses none (up to kMaxPending).
      if (before >= 0 && ::ftruncate(json_fd_, before) != 0) { /* a torn row is dropped on read */
      }
      csv_rewrite_ = true;  // progress.csv is derived: regenerate it once writes work again
      if (json_buf_.size() > kMaxPending) {
        json_buf_.clear();
        return fail(r.error().message,
                    " (more than 64 MiB of results waiting: dropped; they remain in stdout.log)");
      }
      return r;
    }
    json_buf_.clear();
  }
  if (csv_rewrite_) {
    csv_rewrite_ = false;
    csv_buf_.clear();
    last_csv_buf_ = std::string::npos;
    last_csv_file_ = -1;  // (rewrite_csv() sets it to its last row)
    auto r = rewrite_csv();
    if (!r) csv_rewrite_ = true;  // regenerated at the next flush
    return r;
  }
  if (!csv_buf_.empty()) {
    off_t before = ::lseek(csv_fd_, 0, SEEK_END);
    auto r = write_all(csv_fd_, csv_buf_, dir_ / "progress.csv");
    if (r && last_csv_buf_ != std::string::npos && before >= 0)
      last_csv_file_ = before + static_cast<off_t>(last_csv_buf_);
    last_csv_buf_ = std::string::npos;
    csv_buf_.clear();
    return r;
  }
  return {};
}

Result<void> ResultLog::rewrite_csv() {
  auto rows = read_results(dir_);
  if (!rows) return std::unexpected(rows.error());
  std::string out = csv_header(columns_);
  size_t last = std::string::npos;  // where the last row starts (mark_last_done rewrites it)
  for (const auto& row : *rows) last = out.size(), csv_row(out, columns_, row);
  // An empty progress.csv (a trial's first rows) holds nothing to keep safe: written in place,
  // without the temporary file and rename, which cost an inode each on some filesystems.
  struct stat st {};
  if (csv_fd_ >= 0 && ::fstat(csv_fd_, &st) == 0 && st.st_size == 0) {
    if (auto r = write_all(csv_fd_, out, dir_ / "progress.csv"); !r) {
      if (::ftruncate(csv_fd_, 0) != 0) { /* regenerated at the next rewrite */
      }
      return r;
    }
  } else {
    if (auto r = util::write_file_atomic(dir_ / "progress.csv", out, false); !r) return r;
    if (csv_fd_ >= 0) ::close(csv_fd_);
    csv_fd_ = ::open((dir_ / "progress.csv").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (csv_fd_ < 0)
      return fail("cannot open '", (dir_ / "progress.csv").string(), "': ", std::strerror(errno));
  }
  if (last != std::string::npos) last_csv_file_ = static_cast<off_t>(last);
  return {};
}

Result<std::vector<json>> ResultLog::read_results(const fs::path& trial_dir, size_t* bad_lines) {
  std::vector<json> rows;
  auto text = util::read_file(trial_dir / "result.json", 1ull << 40);
  if (!text) {
    if (!fs::exists(trial_dir / "result.json")) return rows;
    return std::unexpected(text.error());
  }
  size_t bad = 0;
  size_t start = 0;
  while (start < text->size()) {
    size_t nl = text->find('\n', start);
    if (nl == std::string::npos) {  // torn last line
      ++bad;
      break;
    }
    auto j = util::parse_json_ext(std::string_view(*text).substr(start, nl - start));
    if (j.is_object())
      rows.push_back(std::move(j));
    else
      ++bad;
    start = nl + 1;
  }
  if (bad_lines) *bad_lines = bad;
  return rows;
}

namespace {

// training_iteration of one result.json line, or -1.
int64_t line_iteration(std::string_view line) {
  auto j = util::parse_json_ext(line);
  if (!j.is_object()) return -1;
  auto it = j.find("training_iteration");
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

// Byte length of the header plus the first `records` CSV records (quotes may hold newlines),
// or npos if the file has fewer.
size_t csv_prefix(std::string_view text, size_t records) {
  size_t pos = 0, seen = 0;
  bool quoted = false;
  for (; pos < text.size() && seen < records + 1; ++pos) {
    if (text[pos] == '"') quoted = !quoted;
    if (text[pos] == '\n' && !quoted) ++seen;
  }
  return seen == records + 1 ? pos : std::string::npos;
}

}  // namespace

Result<void> ResultLog::truncate_after(const fs::path& trial_dir, int64_t iteration,
                                       std::vector<json>* kept_rows) {
  // Fast path: the driver writes iterations 1, 2, 3, ... one per line, so keeping iterations
  // <= K keeps the first K lines; only the lines at the cut are parsed.
  if (!kept_rows) {
    auto text = util::read_file(trial_dir / "result.json", 1ull << 40);
    if (!text)
      return fs::exists(trial_dir / "result.json") ? fail(text.error().message) : Result<void>{};
    std::vector<size_t> ends;  // end (past '\n') of each complete line, up to K+1 lines
    size_t lines = 0, pos = 0;
    auto want = static_cast<size_t>(std::max<int64_t>(iteration, 0)) + 1;
    while (pos < text->size()) {
      size_t nl = text->find('\n', pos);
      if (nl == std::string::npos) break;
      if (ends.size() < want) ends.push_back(nl + 1);
      ++lines;
      pos = nl + 1;
    }
    bool torn = pos < text->size();
    size_t k = std::min(static_cast<size_t>(std::max<int64_t>(iteration, 0)), lines);
    auto line = [&](size_t i) {  // 1-based
      size_t from = i == 1 ? 0 : ends[i - 2];
      return std::string_view(*text).substr(from, ends[i - 1] - 1 - from);
    };
    bool ok = (k == 0 || line_iteration(line(k)) == static_cast<int64_t>(k)) &&
              (k == lines || line_iteration(line(k + 1)) > iteration);
    if (ok) {
      if (k == lines && !torn) return {};
      std::string_view keep = std::string_view(*text).substr(0, k == 0 ? 0 : ends[k - 1]);
      auto csv = util::read_file(trial_dir / "progress.csv", 1ull << 40);
      size_t csv_len = csv ? csv_prefix(*csv, k) : std::string::npos;
      if (csv_len != std::string::npos) {
        if (auto r = util::write_file_atomic(trial_dir / "result.json", keep, false); !r) return r;
        return util::write_file_atomic(trial_dir / "progress.csv",
                                       std::string_view(*csv).substr(0, csv_len), false);
      }
    }
  }
  size_t bad = 0;
  auto rows = read_results(trial_dir, &bad);
  if (!rows) return std::unexpected(rows.error());
  std::string out;
  std::vector<json> kept;
  size_t total = rows->size();
  for (auto& row : *rows) {
    auto it = row.find("training_iteration");
    if (it == row.end() || !it->is_number_integer() || it->get<int64_t>() > iteration) continue;
    util::dump_json_ext(row, out);
    out.push_back('\n');
    kept.push_back(std::move(row));
  }
  if (kept.size() == total && bad == 0) {  // nothing to drop (or no file at all)
    if (kept_rows) *kept_rows = std::move(kept);
    return {};
  }
  if (auto r = util::write_file_atomic(trial_dir / "result.json", out, false); !r) return r;
  // progress.csv: same rows, same header as before (or derived from the rows).
  ResultLog log;
  log.dir_ = trial_dir;
  if (auto text = util::read_file(trial_dir / "progress.csv", 1ull << 40); text && !text->empty()) {
    auto nl = text->find('\n');
    if (nl != std::string::npos) log.columns_ = parse_csv_header(text->substr(0, nl));
  }
  for (const auto& c : log.columns_) log.known_.insert(c);
  bool added = false;
  for (const auto& row : kept) log.add_columns(row, "", added);
  std::string csv = log.columns_.empty() ? std::string() : csv_header(log.columns_);
  for (const auto& row : kept) csv_row(csv, log.columns_, row);
  if (auto r = util::write_file_atomic(trial_dir / "progress.csv", csv, false); !r) return r;
  if (kept_rows) *kept_rows = std::move(kept);
  return {};
}

}  // namespace tune::trial
