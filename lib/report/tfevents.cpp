#include "report/tfevents.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "report/gather.hpp"
#include "util/fs.hpp"

namespace tune::report {

using json = nlohmann::json;

namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_table();

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

template <typename T>
void put_fixed(std::string& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view data) {
  put_tag(out, field, 2);
  put_varint(out, data.size());
  out.append(data);
}

void put_le64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void scalars_of(const json& v, const std::string& tag,
                std::vector<std::pair<std::string, float>>& out, int depth) {
  if (v.is_object() && depth < 16) {
    for (const auto& [k, sub] : v.items()) {
      if (depth == 0 && is_bookkeeping_key(k)) continue;
      scalars_of(sub, tag.empty() ? k : tag + "/" + k, out, depth + 1);
    }
  } else if (v.is_number() && !v.is_boolean()) {
    double d = v.get<double>();
    if (std::isfinite(d)) out.emplace_back(tag, static_cast<float>(d));
  }
}

std::string event_head(double wall_time) {
  std::string e;
  put_tag(e, 1, 1);  // wall_time: double
  put_fixed(e, wall_time);
  return e;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfrecord(std::string_view data) {
  std::string len;
  put_le64(len, data.size());
  std::string out = len;
  put_le32(out, masked_crc(crc32c(len)));
  out.append(data);
  put_le32(out, masked_crc(crc32c(data)));
  return out;
}

std::string version_event(double wall_time) {
  std::string e = event_head(wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_tag(value, 2, 5);  // simple_value: float
    put_fixed(value, v);
    put_bytes(summary, 1, value);
  }
  std::string e = event_head(wall_time);
  put_tag(e, 2, 0);  // step: int64
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, 5, summary);
  return e;
}

std::vector<std::pair<std::string, float>> result_scalars(const json& row) {
  std::vector<std::pair<std::string, float>> out;
  if (row.is_object()) scalars_of(row, "", out, 0);
  return out;
}

EventWriter::EventWriter(std::filesystem::path trial_dir, std::string host)
    : dir_(std::move(trial_dir)), host_(std::move(host)) {}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventWriter::add(const json& result) {
  auto it = result.find("training_iteration");
  if (it == result.end() || !it->is_number_integer()) return;
  double wall = static_cast<double>(std::time(nullptr));
  if (auto ts = result.find("timestamp"); ts != result.end() && ts->is_number()) wall = *ts;
  auto values = result_scalars(result);
  if (values.empty()) return;
  if (!versioned_) buf_ += tfrecord(version_event(wall));
  versioned_ = true;
  buf_ += tfrecord(scalars_event(wall, it->get<int64_t>(), values));
}

Result<void> EventWriter::create() {
  std::string base = "events.out.tfevents." + std::to_string(std::time(nullptr)) + "." +
                     util::safe_component(host_, 100);
  for (int i = 0; i < 100; ++i) {
    auto p = dir_ / (i ? base + "." + std::to_string(i) : base);
    fd_ = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ >= 0) {
      path_ = p;
      return {};
    }
    if (errno != EEXIST) break;
  }
  return fail("cannot create a TensorBoard event file in '", dir_.string(),
              "': ", std::strerror(errno));
}

Result<void> EventWriter::flush() {
  if (buf_.empty()) return {};
  if (fd_ < 0)
    if (auto r = create(); !r) {
      buf_.clear();  // TensorBoard files are a convenience: never hold rows for them
      return r;
    }
  size_t done = 0;
  while (done < buf_.size()) {
    ssize_t n = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // A torn record would end TensorBoard's reading of the file: take it back.
      off_t end = ::lseek(fd_, 0, SEEK_END);
      if (end >= 0 && ::ftruncate(fd_, end - static_cast<off_t>(done)) != 0) {
        // nothing more to do: the write's error below says what went wrong
      }
      buf_.clear();
      return fail("cannot write '", path_.string(), "': ", std::strerror(n < 0 ? errno : ENOSPC));
    }
    done += static_cast<size_t>(n);
  }
  buf_.clear();
  return {};
}

}  // namespace tune::report
