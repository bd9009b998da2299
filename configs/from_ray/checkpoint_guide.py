"""A trainable reporting an AUC that rises then falls, with a checkpoint each iteration."""
import os
import tempfile

import tune_trial

config = tune_trial.config()
checkpoint = tune_trial.get_checkpoint()
start = int(open(os.path.join(checkpoint, "step")).read()) if checkpoint else 0
for step in range(start + 1, 11):
    auc = 0.5 + config["rate"] * step * (11 - step) / 30
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "step"), "w") as f:
            f.write(str(step))
        tune_trial.report({"auc": auc}, checkpoint_dir=d)
