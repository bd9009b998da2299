#!/usr/bin/env bash
# The README's second command (and CI's): set up, build, run every test through ctest,
# then the unit tests and the fuzz corpora's replay again under AddressSanitizer +
# UndefinedBehaviorSanitizer.
#   TUNE_SKIP_ASAN=1 scripts/test.sh    skips the sanitizer pass (quicker local runs)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)
status=0
ctest --preset default -j"$jobs" || status=1
if [ "${TUNE_SKIP_ASAN:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build build-asan -j"$jobs" --target tune_unit_tests tune fuzz_replay_all
  ctest --preset asan -j"$jobs" || status=1
fi
exit "$status"
