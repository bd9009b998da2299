// The ops an external searcher was sent (suggest, result, complete), one JSON line each, in
// order, appended before each is sent: a resumed run replays those after its snapshot, in the
// order the searcher first saw them (search/external.hpp). Read back as untrusted input.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "util/error.hpp"

namespace tune::search {

class OpJournal {
 public:
  OpJournal() = default;
  OpJournal(const OpJournal&) = delete;
  OpJournal& operator=(const OpJournal&) = delete;
  ~OpJournal();

  // Opens (or creates) `file`; returns the ops it holds. A torn or unreadable last line (a
  // crash mid-write) is cut off; an unreadable line before it ends the history there (warned).
  [[nodiscard]] Result<std::vector<nlohmann::json>> open(const std::filesystem::path& file);
  // Appends one op (a single write, newline included).
  [[nodiscard]] Result<void> append(const nlohmann::json& op);
  // Ops in the journal (those read at open, plus those appended).
  [[nodiscard]] uint64_t count() const { return count_; }

 private:
  int fd_ = -1;
  uint64_t count_ = 0;
  std::filesystem::path file_;
};

}  // namespace tune::search
