// tune-supervisor's file operations on worker hosts (--adopt, --rm), for the driver's shell on
// a host whose agent cannot be asked: lib/agent/file_ops.hpp does them.
#include "remote_ops.hpp"

#include <cstdio>
#include <cstring>
#include <string>

#include "agent/file_ops.hpp"

// --adopt TRIAL_DIR REPORTED DEST / --rm DIR NAME. Prints one line on failure, exits 1.
int remote_op(int argc, char** argv) {
  std::string error;
  if (std::strcmp(argv[1], "--rm") == 0 && argc == 4)
    error = tune::agent::remove_entry(argv[2], argv[3]);
  else if (std::strcmp(argv[1], "--adopt") == 0 && argc == 5)
    error = tune::agent::adopt_dir(argv[2], argv[3], argv[4]);
  else
    error = "usage: tune-supervisor --adopt TRIAL_DIR REPORTED DEST | --rm DIR NAME";
  if (error.empty()) return 0;
  std::fprintf(stderr, "%s\n", error.c_str());
  return 1;
}
