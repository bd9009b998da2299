"""A tune trial that replays a precomputed digits curve (objective.py): it reports
{"epoch", "val_acc"} per epoch and checkpoints with pickle like configs/examples/digits_mlp.py,
so schedulers stop, pause and resume it as they would the real one. Each epoch sleeps
BENCH_TIME_SCALE times the seconds the real epoch took, so trials interleave roughly as real ones
do. Every epoch it runs is appended to BENCH_EPOCH_LOG (to catch an epoch run twice).
A config missing from BENCH_CURVES is an error: the run did not sample the configs it should."""
import json
import os
import pickle
import sys
import tempfile
import time

import tune_trial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from objective import key  # noqa: E402

cfg = tune_trial.config()
with open(os.environ["BENCH_CURVES"]) as f:
    curves = json.load(f)
if key(cfg) not in curves:
    sys.exit("replay_trial: config not in the curve cache: " + key(cfg))
points = curves[key(cfg)]
scale = float(os.environ.get("BENCH_TIME_SCALE", "0.5"))
epochs = int(cfg.get("epochs", 27))

start = 0
ckpt = tune_trial.get_checkpoint()
if ckpt:
    with open(os.path.join(ckpt, "model.pkl"), "rb") as f:
        start = pickle.load(f)["epoch"]

for epoch in range(start, epochs):
    acc, secs = points[epoch]
    time.sleep(secs * scale)
    with open(os.environ["BENCH_EPOCH_LOG"], "a") as log:
        log.write(json.dumps({"trial": os.environ.get("TUNE_TRIAL_ID", ""), "key": key(cfg),
                              "epoch": epoch + 1}) + "\n")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "model.pkl"), "wb") as f:
            pickle.dump({"epoch": epoch + 1}, f)
        tune_trial.report({"epoch": epoch + 1, "val_acc": acc}, checkpoint_dir=d)
sys.stdout.flush()
