// `tune export`: the experiment as one table on stdout (trials, or every result row).
#include <iostream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "report/export.hpp"
#include "ui/progress_bar.hpp"
#include "ui/terminal.hpp"
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
  // A bar on stderr (a terminal's) while the trials are read; the table goes to stdout.
  ui::StagedProgress bar(ui::stderr_can_redraw());
  report::Skipped skipped;
  auto r = report::export_experiment(
      dir, f, all_results_, std::cout,
      [&](size_t done, size_t n) { bar.update("reading trials", done, n); }, &skipped);
  bar.finish();
  if (!r) throw Fatal("export of '" + dir.string() + "': " + r.error().message, kExitUsage);
  if (skipped.lines > 0)
    std::cerr << "tune: warning: " << skipped.lines << " line(s) of result.json in "
              << skipped.files << " trial(s) are not result rows (torn or corrupt) and are "
              << "left out of the export, e.g. in " << skipped.first.string() << "\n";
  return kExitOk;
}

}  // namespace tune::cli
