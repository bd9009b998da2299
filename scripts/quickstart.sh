#!/usr/bin/env bash
# The README's first command: set up, build, run the quickstart experiment, list its checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export TUNE_STORAGE_PATH="${TUNE_STORAGE_PATH:-$HOME/tune_results}"
# A fresh quickstart each time: earlier results move aside instead of blocking the run.
if [ -e "$TUNE_STORAGE_PATH/quickstart" ]; then
  old="$TUNE_STORAGE_PATH/quickstart.$(date +%Y%m%d-%H%M%S)"
  mv "$TUNE_STORAGE_PATH/quickstart" "$old"
  echo "quickstart: moved the previous run to $old"
fi
build/tune run configs/quickstart.yaml
echo
build/tune checkpoints ls quickstart --top 5
