"""Runs configs/torch_example.yaml when Debian's python3-torch is installed; exits 77 (ctest:
skipped, visibly) when it is not."""
import json
import os
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("TUNE_SOURCE_DIR") or os.path.abspath("../..")
TUNE = os.environ.get("TUNE_BIN") or os.path.join(SOURCE, "build", "tune")

if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
    print("SKIPPED: python3-torch is not installed (TUNE_WITH_TORCH=1 scripts/setup.sh installs it)")
    sys.exit(77)

with tempfile.TemporaryDirectory() as storage:
    p = subprocess.run([TUNE, "run", os.path.join(SOURCE, "configs", "torch_example.yaml"), "--quiet",
                        "--storage-path", storage], capture_output=True, text=True, timeout=560)
    print(p.stdout, p.stderr)
    if p.returncode != 0:
        sys.exit("torch example failed with exit code %d" % p.returncode)
    with open(os.path.join(storage, "torch-mlp", "experiment_state.json")) as f:
        state = json.load(f)
    trials = state["trials"]
    assert len(trials) == 4 and all(t["status"] == "TERMINATED" for t in trials), trials
    assert all(t["metrics"]["val_accuracy"]["max"] > 0.7 for t in trials), "the MLP did not learn"
    print("torch example: 4 trials TERMINATED")
