// `tune export`: the experiment as one table on stdout (trials, or every result row).
#include <iostream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "report/export.hpp"
#include "util/error.hpp"

namespace tune::cli {

void ExportCommand::add_options(CLI::App& app) {
  add_experiment_options(app, experiment_, storage_);
  app.add_option("--format", format_, "csv | json | jsonl")
      ->check(CLI::IsMember({"csv", "json", "jsonl"}));
  app.add_flag("--all-results", all_results_, "every result row instead of one row per trial");
}

int ExportCommand::execute() {
  fs::path dir = resolve_experiment(experiment_, storage_);
  auto f = format_ == "json"    ? report::ExportFormat::kJson
           : format_ == "jsonl" ? report::ExportFormat::kJsonl
                                : report::ExportFormat::kCsv;
  std::ios::sync_with_stdio(false);
  auto r = report::export_experiment(dir, f, all_results_, std::cout);
  if (!r) throw Fatal("export of '" + dir.string() + "': " + r.error().message, kExitUsage);
  return kExitOk;
}

}  // namespace tune::cli
