// The ops an external searcher was sent (suggest, result, complete), one JSON line each, in
// order, appended before each is sent: a resumed run replays those after its snapshot, in the
// order the searcher first saw them (search/external.hpp). Read back as untrusted input.
//
// Ops are numbered from the start of the experiment. compact() drops the ops before a number
// (those a snapshot already holds): the file then starts with a header line
// {"op": "base", "ops": N}, N the number of its first op, and is swapped in whole (written
// beside, fsynced, renamed), so a crash leaves either the old or the new journal.
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

  // Opens (or creates) `file`; returns the ops it holds, from op number base() on. A torn or
  // unreadable last line (a crash mid-write) is cut off; an unreadable line before it ends the
  // history there (warned).
  [[nodiscard]] Result<std::vector<nlohmann::json>> open(const std::filesystem::path& file);
  // Appends one op (a single write, newline included).
  [[nodiscard]] Result<void> append(const nlohmann::json& op);
  // Drops the ops numbered below `upto` (at most count()); nothing when none would go. On an
  // error the journal is left as it was, unless the swapped-in file cannot be reopened.
  [[nodiscard]] Result<void> compact(uint64_t upto);
  // The number of the first op the file holds (0 until compacted).
  [[nodiscard]] uint64_t base() const { return base_; }
  // Ops sent in the experiment's life: base() plus those in the file.
  [[nodiscard]] uint64_t count() const { return base_ + starts_.size(); }

 private:
  [[nodiscard]] Result<void> reopen(uint64_t size);
  int fd_ = -1;
  uint64_t base_ = 0;
  std::vector<uint64_t> starts_;  // byte offset of each op's line in the file
  uint64_t size_ = 0;             // bytes of whole lines in the file
  std::filesystem::path file_;
};

}  // namespace tune::search
