// The `tune` command line: subcommands run, validate, status, ls, checkpoints ls|best.
#pragma once

namespace tune::cli {

// Parses argv, runs the subcommand, prints `tune: error: ...` for failures; returns the exit code.
// `version` is what --version prints after "tune ".
[[nodiscard]] int main(int argc, char** argv, const char* version);

}  // namespace tune::cli
