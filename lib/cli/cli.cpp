#include "cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "util/error.hpp"
#include "util/strings.hpp"

namespace tune::cli {

int main(int argc, char** argv, const char* version) {
  CLI::App app{"tune: hyperparameter tuning for any training script, on this machine or over SSH",
               "tune"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tune ") + version);

  RunCommand run;
  auto* run_cmd = app.add_subcommand("run", "run (or resume) an experiment");
  run.add_options(*run_cmd);

  ValidateCommand validate;
  auto* validate_cmd =
      app.add_subcommand("validate", "check an experiment file and print the trials it would run");
  validate.add_options(*validate_cmd);

  StatusCommand status;
  auto* status_cmd = app.add_subcommand("status", "the trial table of an experiment");
  status.add_options(*status_cmd);

  LsCommand ls;
  auto* ls_cmd = app.add_subcommand("ls", "experiments under the storage path");
  ls.add_options(*ls_cmd);

  auto* ckpt_cmd = app.add_subcommand("checkpoints", "retained checkpoints");
  ckpt_cmd->require_subcommand(1);
  CheckpointsLsCommand ckpt_ls;
  ckpt_ls.add_options(*ckpt_cmd->add_subcommand("ls", "retained checkpoints, best first"));
  CheckpointsBestCommand ckpt_best;
  ckpt_best.add_options(
      *ckpt_cmd->add_subcommand("best", "print the best checkpoint's absolute path"));

  ReportCommand report;
  auto* report_cmd =
      app.add_subcommand("report", "write the experiment's self-contained HTML report");
  report.add_options(*report_cmd);

  ExportCommand export_;
  auto* export_cmd = app.add_subcommand("export", "the experiment as one table (csv, json, jsonl)");
  export_.add_options(*export_cmd);

  StopCommand stop;
  auto* stop_cmd = app.add_subcommand(
      "stop", "stop a running experiment (its driver, or its detached trials); resumable");
  stop.add_options(*stop_cmd);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tune: error: %s (see 'tune --help')\n", e.what());
    return kExitUsage;
  }
  // Until a command sets up its own logging, warnings go to stderr (never stdout, which
  // `checkpoints best` and `export` keep for their answer), formatted as later ones.
  setup_logging({}, false, false, nullptr, false);
  try {
    if (run_cmd->parsed()) return run.execute();
    if (validate_cmd->parsed()) return validate.execute();
    if (status_cmd->parsed()) return status.execute();
    if (ls_cmd->parsed()) return ls.execute();
    if (report_cmd->parsed()) return report.execute();
    if (export_cmd->parsed()) return export_.execute();
    if (ckpt_cmd->got_subcommand("ls")) return ckpt_ls.execute();
    if (ckpt_cmd->got_subcommand("best")) return ckpt_best.execute();
    if (stop_cmd->parsed()) return stop.execute();
  } catch (const Fatal& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tune: error: %s\n", e.what());
    return e.code();
  } catch (const std::exception& e) {
    // A bug, or a resource we could not get: one line and exit 1, never an abort (`tune run`
    // saved the state before this, so the experiment can be resumed).
    std::fflush(stdout);
    std::fprintf(stderr, "tune: error: internal error: %s\n", util::printable(e.what()).c_str());
    return kExitTrialError;
  }
  return kExitUsage;
}

}  // namespace tune::cli
