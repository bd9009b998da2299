"""A tune trial that replays the digits curve of its config (bench/search/digits-curves.json,
the nearest listed config as digits_search.py's Table picks it): one {"epoch", "val_acc"} line
per epoch, no sleeping, a checkpoint (the epoch reached) with each, so hyperband's pauses resume
where the trial stopped. Used by digits_search.py --driver."""
import json
import os
import sys
import tempfile

import tune_trial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_search import Table  # noqa: E402

cfg = tune_trial.config()
curve = Table(os.environ["BENCH_CURVES"]).curve(cfg)
epochs = int(cfg.get("epochs", 27))
start = 0
ckpt = tune_trial.get_checkpoint()
if ckpt:
    with open(os.path.join(ckpt, "epoch.json")) as f:
        start = json.load(f)["epoch"]
for epoch in range(start, epochs):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "epoch.json"), "w") as f:
            json.dump({"epoch": epoch + 1}, f)
        tune_trial.report({"epoch": epoch + 1, "val_acc": curve[epoch]}, checkpoint_dir=d)
