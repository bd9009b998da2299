// The host-wide ledger: what each of this user's running experiments holds on this machine, so
// that concurrent experiments share its CPUs and never hand out the same GPU twice.
//
// One small file of JSON lines (`ledger.json`), flock'd and rewritten in place for every
// read-modify-write (readers take a shared lock), in `$XDG_RUNTIME_DIR/tune/` or
// `/tmp/tune-<uid>/`. Each entry names its driver by pid and process start time: an entry whose
// driver is gone (a crash, kill -9) or whose pid now belongs to another process counts for
// nothing and is dropped at the next write.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tune::control {

namespace fs = std::filesystem;

// What one experiment's driver holds on this machine.
struct LedgerEntry {
  pid_t pid = 0;
  uint64_t start_ticks = 0;    // the driver's start time (guards against pid reuse)
  std::string exp_dir;         // the experiment, for `tune status`
  double cpus = 0;             // CPUs held by its running trials
  std::map<int, double> gpus;  // GPU index -> fraction held
  double waiting_until = 0;    // wall clock: it waits for CPUs others hold, until then
  [[nodiscard]] bool holds_anything() const { return cpus > 0 || !gpus.empty(); }
};

class Ledger {
 public:
  // Opens (creating it 0700) the ledger directory `dir` for the experiment in `exp_dir`. Fails
  // if `dir` is not a private directory of this user (a symlink, another owner, group/other
  // writable).
  [[nodiscard]] static Result<std::unique_ptr<Ledger>> open(const fs::path& dir,
                                                            const fs::path& exp_dir);
  // $XDG_RUNTIME_DIR/tune if that variable names an absolute path, else /tmp/tune-<uid>.
  [[nodiscard]] static fs::path default_dir();
  // The entries of live drivers (read under a shared lock); an absent ledger is empty.
  // Unreadable lines are skipped.
  [[nodiscard]] static std::vector<LedgerEntry> read_live(const fs::path& dir);

  ~Ledger();  // removes this driver's entry
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Under the lock: reads the other live entries, lets `decide` look at them and fill in this
  // driver's entry (pid, start time and experiment are kept), writes the ledger back. Returns
  // what `decide` returned.
  [[nodiscard]] Result<bool> transact(
      const std::function<bool(const std::vector<LedgerEntry>& others, LedgerEntry& mine)>& decide);

 private:
  Ledger() = default;
  fs::path dir_;
  int fd_ = -1;  // ledger.json, flock'd around each read-modify-write
  LedgerEntry mine_;
};

}  // namespace tune::control
