// One class per subcommand (as in Bear): each owns its options and its execute().
// execute() returns the exit code or throws tune::Fatal.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tune::cli {

class RunCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string file_;
  std::string resume_ = "never";
  std::optional<std::string> name_, storage_;
  std::vector<std::string> sets_;
  std::optional<int> max_concurrent_;
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
};

class CheckpointsBestCommand {
 public:
  void add_options(CLI::App& app);
  [[nodiscard]] int execute();

 private:
  std::string experiment_;
  std::optional<std::string> storage_, metric_, mode_;
};

}  // namespace tune::cli
