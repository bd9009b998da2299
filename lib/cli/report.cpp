// `tune report`: the experiment's self-contained HTML page, from its dir alone.
#include <iostream>
#include <optional>

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "report/html.hpp"
#include "ui/progress_bar.hpp"
#include "ui/terminal.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

namespace tune::cli {

void ReportCommand::add_options(CLI::App& app) {
  add_experiment_options(app, experiment_, storage_);
  app.add_option("-o,--output", output_,
                 "the HTML file to write (default: <experiment>/report.html)");
}

int ReportCommand::execute() {
  fs::path dir = resolve_experiment(experiment_, storage_);
  fs::path out = output_ ? fs::absolute(util::expand_user(*output_)) : dir / "report.html";
  // A bar on a terminal while the trials' results are read (a big experiment takes seconds).
  std::optional<ui::ProgressBar> bar;
  auto r = report::write_report(dir, out, [&](size_t done, size_t total) {
    if (!bar) bar.emplace("reading trials", total, ui::stderr_can_redraw());
    bar->update(done);
  });
  if (bar) bar->finish();
  if (!r) throw Fatal("report of '" + dir.string() + "': " + r.error().message, kExitUsage);
  std::cout << out.string() << "\n";
  return kExitOk;
}

}  // namespace tune::cli
