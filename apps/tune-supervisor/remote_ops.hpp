// tune-supervisor's file operations on worker hosts:
//   tune-supervisor --adopt TRIAL_DIR REPORTED DEST   move a reported checkpoint dir into
//                                                     TRIAL_DIR/DEST (it must lie in TRIAL_DIR
//                                                     or the temp dir, be a real directory)
//   tune-supervisor --rm DIR NAME                     delete DIR/NAME, never following a symlink
#pragma once

// Runs the operation argv names (argv[1] starts with "--"); prints one line on failure and
// returns 1, else 0.
int remote_op(int argc, char** argv);
