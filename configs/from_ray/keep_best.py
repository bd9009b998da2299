"""Four checkpoints with the losses 2, 4, 1, 3 (Ray Train's CheckpointStrategy example)."""
import os
import tempfile

import tune_trial

for loss in (2, 4, 1, 3):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "loss"), "w") as f:
            f.write(str(loss))
        tune_trial.report({"loss": loss}, checkpoint=tune_trial.Checkpoint.from_directory(d))
