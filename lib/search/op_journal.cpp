#include "search/op_journal.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "util/json_ext.hpp"

namespace tune::search {

using json = nlohmann::json;

namespace {

// Deepest op line read back: a trial's result (at most kMaxJsonDepth deep) inside an op.
constexpr size_t kMaxOpDepth = util::kMaxJsonDepth + 8;

std::string header(uint64_t base) {
  return json{{"op", "base"}, {"ops", base}}.dump() + "\n";
}

Result<void> write_all(int fd, const std::string& data, const std::filesystem::path& file) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write '", file.string(), "': ", std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  return {};
}
}  // namespace

OpJournal::~OpJournal() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::vector<json>> OpJournal::open(const std::filesystem::path& file) {
  file_ = file;
  base_ = 0;
  starts_.clear();
  std::vector<json> ops;
  uint64_t keep = 0;  // bytes of whole, valid lines
  {
    std::ifstream in(file, std::ios::binary);
    std::string line;
    uint64_t at = 0;
    for (size_t n = 0; in && std::getline(in, line); ++n) {
      bool whole = !in.eof();  // getline stopped at a newline
      // Depth-limited: the ops are printed again on replay, recursively.
      json j = whole ? util::parse_json_ext(line, kMaxOpDepth) : json(json::value_t::discarded);
      bool is_header = n == 0 && j.is_object() && j.value("op", json()) == "base";
      if (j.is_discarded() || !j.is_object() || !j.contains("op") ||
          (is_header && !j.value("ops", json()).is_number_unsigned())) {
        if (whole && in.peek() != EOF)
          spdlog::warn("{}: line {} is not a searcher op: the history ends before it",
                       file.string(), n + 1);
        break;
      }
      if (is_header) {
        base_ = j["ops"].get<uint64_t>();
      } else {
        starts_.push_back(at);
        ops.push_back(std::move(j));
      }
      at += line.size() + 1;
      keep = at;
    }
  }
  if (auto r = reopen(keep); !r) return std::unexpected(r.error());
  return ops;
}

Result<void> OpJournal::reopen(uint64_t size) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return fail("cannot open '", file_.string(), "': ", std::strerror(errno));
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(size), SEEK_SET) < 0)
    return fail("cannot cut '", file_.string(), "': ", std::strerror(errno));
  size_ = size;
  return {};
}

Result<void> OpJournal::append(const json& op) {
  std::string line = op.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (auto r = write_all(fd_, line, file_); !r) return r;
  starts_.push_back(size_);
  size_ += line.size();
  return {};
}

Result<void> OpJournal::compact(uint64_t upto) {
  upto = std::min(upto, count());
  if (upto <= base_) return {};
  uint64_t from = upto == count() ? size_ : starts_[upto - base_];
  // The kept lines, read back from the file (it holds only what followed the last snapshot).
  std::string kept(size_ - from, '\0');
  {
    std::ifstream in(file_, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(from));
    if (!in.read(kept.data(), static_cast<std::streamsize>(kept.size())))
      return fail("cannot read '", file_.string(), "' back");
  }
  std::filesystem::path tmp = file_;
  tmp += ".tmp";
  std::string head = header(upto);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("cannot open '", tmp.string(), "': ", std::strerror(errno));
  auto wrote = write_all(fd, head + kept, tmp);
  if (wrote && ::fsync(fd) != 0) wrote = fail("cannot sync '", tmp.string(), "'");
  ::close(fd);
  if (!wrote) return wrote;
  if (::rename(tmp.c_str(), file_.c_str()) != 0)
    return fail("cannot rename '", tmp.string(), "': ", std::strerror(errno));
  if (int dir = ::open(file_.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  std::vector<uint64_t> starts;
  for (uint64_t i = upto - base_; i < starts_.size(); ++i)
    starts.push_back(starts_[i] - from + head.size());
  starts_ = std::move(starts);
  base_ = upto;
  return reopen(head.size() + kept.size());
}

}  // namespace tune::search
