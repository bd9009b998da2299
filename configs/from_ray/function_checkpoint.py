"""Function API with checkpoints (Ray's "save and load" guide, function API), on tune's helper.

Reports every epoch; saves a checkpoint every `checkpoint_freq` epochs; a retried or resumed
trial starts after the epoch of its checkpoint. The "model" is a number, kept in JSON."""
import json
import os
import tempfile

import tune_trial

config = tune_trial.config()
start, weight = 1, 0.0
checkpoint = tune_trial.get_checkpoint()
if checkpoint:
    with checkpoint.as_directory() as d:
        with open(os.path.join(d, "checkpoint.json")) as f:
            saved = json.load(f)
    start, weight = saved["epoch"] + 1, saved["weight"]

for epoch in range(start, config["epochs"] + 1):
    weight += config["lr"]  # model training here
    metrics = {"metric": weight, "epoch": epoch}
    if epoch % config["checkpoint_freq"] == 0:
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "checkpoint.json"), "w") as f:
                json.dump({"epoch": epoch, "weight": weight}, f)
            tune_trial.report(metrics, checkpoint=tune_trial.Checkpoint.from_directory(d))
    else:
        tune_trial.report(metrics)
