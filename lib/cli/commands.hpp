// One class per subcommand (as in Bear): each owns its options and its execute().
// execute() returns the exit code or throws tune::Fatal.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tune::spec {
struct Experiment;
}

namespace tune::cli {

namespace fs = std::filesystem;

class RunCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  // No local state and an upload_dir: refuses (never) or downloads (auto/must/errored) an
  // experiment the mirror holds.
  void find_mirrored_state(const spec::Experiment& exp, const fs::path& dir, bool& has_state) const;

  std::string file_;
  std::string resume_ = "never";
  std::optional<std::string> name_, storage_;
  std::optional<std::string> restore_from_;  // --restore-from DIR|URI
  std::vector<std::string> sets_;
  std::optional<int> max_concurrent_;
  std::optional<std::string> columns_;  // --columns loss,acc,config/lr
  bool quiet_ = false, verbose_ = false;
};

class ValidateCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string file_;
  std::vector<std::string> sets_;
  std::optional<std::string> name_, storage_;
  std::string format_ = "table";
};

class StatusCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string experiment_;
  std::optional<std::string> storage_;
  std::string format_ = "table";
};

class LsCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::optional<std::string> storage_;
  std::string format_ = "table";
};

class CheckpointsLsCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string experiment_;
  std::optional<std::string> storage_, trial_, metric_, mode_;
  std::optional<size_t> top_;
  std::string format_ = "table";
  bool include_errored_ = false;  // also rank checkpoints of trials in ERROR
};

class CheckpointsBestCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string experiment_;
  std::optional<std::string> storage_, metric_, mode_;
  bool include_errored_ = false;  // also rank checkpoints of trials in ERROR
};

class ReportCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string experiment_;
  std::optional<std::string> storage_, output_;
};

class ExportCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string experiment_;
  std::optional<std::string> storage_;
  std::string format_ = "csv";
  bool all_results_ = false;
};

class StopCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string experiment_;
  std::optional<std::string> storage_, trial_;
  double timeout_s_ = 60;  // how long to wait for what was stopped to be gone
  // --trial while a driver runs: asks it to stop that trial, waits until it has ended.
  int stop_one_trial(const fs::path& dir, const std::string& driver_pid);
};

}  // namespace tune::cli
