// The `tune` command: everything lives in the library (lib/cli).
#include "cli/cli.hpp"
#include "tune_version.hpp"

int main(int argc, char** argv) {
  return tune::cli::main(argc, argv, tune::kVersion);
}
