#include "search/op_journal.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace tune::search {

using json = nlohmann::json;

OpJournal::~OpJournal() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::vector<json>> OpJournal::open(const std::filesystem::path& file) {
  file_ = file;
  std::vector<json> ops;
  uint64_t keep = 0;  // bytes of whole, valid lines
  {
    std::ifstream in(file, std::ios::binary);
    std::string line;
    uint64_t at = 0;
    while (in && std::getline(in, line)) {
      bool whole = !in.eof();  // getline stopped at a newline
      json j = whole ? json::parse(line, nullptr, false) : json(json::value_t::discarded);
      if (j.is_discarded() || !j.is_object() || !j.contains("op")) {
        if (whole && in.peek() != EOF)
          spdlog::warn("{}: line {} is not a searcher op: the history ends before it",
                       file.string(), ops.size() + 1);
        break;
      }
      ops.push_back(std::move(j));
      at += line.size() + 1;
      keep = at;
    }
  }
  fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return fail("cannot open '", file.string(), "': ", std::strerror(errno));
  if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(keep), SEEK_SET) < 0)
    return fail("cannot cut '", file.string(), "': ", std::strerror(errno));
  count_ = ops.size();
  return ops;
}

Result<void> OpJournal::append(const json& op) {
  std::string line = op.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write '", file_.string(), "': ", std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  ++count_;
  return {};
}

}  // namespace tune::search
