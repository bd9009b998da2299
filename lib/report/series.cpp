#include "report/series.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "report/row_scan.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"

namespace tune::report {

using json = nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const std::set<std::string, std::less<>> kBookkeeping = {
    "training_iteration", "timestamp", "pid", "iterations_since_restore", "done",
    "trial_id",           "hostname",  "date"};

// Not a curve: bookkeeping, or the driver's clocks (in every row, rarely worth a curve, and
// they would double the page; the table and the export have them).
bool is_bookkeeping(std::string_view key) {
  return kBookkeeping.find(key) != kBookkeeping.end() || key == "time_this_iter_s" ||
         key == "time_total_s";
}

}  // namespace

bool is_bookkeeping_key(const std::string& key) {
  return kBookkeeping.count(key) > 0;
}

namespace {

// The fields of a line the scanner gave up on, through the full parser (false: not a row).
bool parse_fields(std::string_view line, json& doc, std::vector<RowField>& fields) {
  doc = util::parse_json_ext(line, 64);
  if (doc.is_discarded() || !doc.is_object()) return false;
  fields.clear();
  for (const auto& [k, v] : doc.items()) {  // in key order, as the scanner's
    RowField f;
    f.key = k;
    if (v.is_number()) {
      f.is_number = true;
      f.integer = v.is_number_integer();
      f.value = v.get<double>();
    }
    fields.push_back(f);
  }
  return true;
}

// Appends one row's values (keys unseen so far are padded with gaps).
void add_row(Series& s, const std::vector<RowField>& fields, size_t max_keys) {
  auto it = std::find_if(fields.begin(), fields.end(),
                         [](const RowField& f) { return f.key == "training_iteration"; });
  if (it == fields.end() || !it->is_number) {
    ++s.bad_lines;
    return;
  }
  size_t n = s.x.size();
  s.x.push_back(it->value);
  s.x_integer = s.x_integer && it->integer;
  for (const auto& f : fields) {
    if (!f.is_number || is_bookkeeping(f.key)) continue;
    auto col = s.y.find(f.key);
    if (col == s.y.end()) {
      if (s.y.size() >= max_keys) continue;
      col = s.y.emplace(std::string(f.key), std::vector<double>(n, kNaN)).first;
    }
    col->second.push_back(std::isfinite(f.value) ? f.value : kNaN);
  }
  for (auto& [k, col] : s.y)
    if (col.size() < n + 1) col.push_back(kNaN);
  ++s.rows;
}

template <typename T>
void append_le(std::string& blob, T v) {
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  auto u = std::bit_cast<U>(v);
  for (size_t b = 0; b < sizeof(U); ++b) blob += static_cast<char>((u >> (8 * b)) & 0xff);
}

void align(std::string& blob, size_t to) {
  while (blob.size() % to) blob += '\0';
}

bool is_run(const Series& s) {
  if (!s.x_integer || s.x.empty()) return false;
  for (size_t i = 1; i < s.x.size(); ++i)
    if (s.x[i] != s.x[0] + static_cast<double>(i)) return false;
  return std::abs(s.x[0]) < 9.0e15;  // exact as a JavaScript number
}

}  // namespace

Series read_series(const std::filesystem::path& trial_dir, size_t max_keys) {
  Series s;
  if (!util::is_regular_file_at(trial_dir / "result.json")) return s;  // absent, or a FIFO
  std::ifstream in(trial_dir / "result.json", std::ios::binary);
  std::string line;
  std::vector<RowField> fields;
  json doc;
  while (in && std::getline(in, line)) {
    if (line.empty()) continue;
    if (!scan_row(line, fields) && !parse_fields(line, doc, fields)) {
      ++s.bad_lines;
      continue;
    }
    add_row(s, fields, max_keys);
  }
  return s;
}

json append_columns(const Series& s, std::string& blob) {
  json out = {{"n", s.x.size()}};
  if (s.x.empty()) {
    out["x0"] = 0;
  } else if (is_run(s)) {
    out["x0"] = static_cast<int64_t>(s.x[0]);
  } else {
    align(blob, 8);
    out["xo"] = blob.size();
    for (double x : s.x) append_le(blob, x);
  }
  json y = json::object();
  constexpr double kMax = std::numeric_limits<float>::max();
  for (const auto& [k, col] : s.y) {
    align(blob, 4);
    y[k] = blob.size();
    for (double v : col)
      append_le(blob, static_cast<float>(std::isnan(v) ? v : std::clamp(v, -kMax, kMax)));
  }
  out["y"] = std::move(y);
  return out;
}

}  // namespace tune::report
