"""Class API (Ray's Trainable): setup / step / save_checkpoint / load_checkpoint, served in
tune's step mode. The "model" is a list of input_size numbers, saved as JSON."""
import json
import os
import sys

import tune_trial


class MyTrainableClass(tune_trial.Trainable):
    def setup(self, config):
        self.model = [0.0] * config.get("input_size", 32)

    def step(self):
        self.model = [w + 0.01 for w in self.model]
        return {"weight_sum": sum(self.model)}

    def save_checkpoint(self, tmp_checkpoint_dir):
        with open(os.path.join(tmp_checkpoint_dir, "model.json"), "w") as f:
            json.dump(self.model, f)

    def load_checkpoint(self, tmp_checkpoint_dir):
        with open(os.path.join(tmp_checkpoint_dir, "model.json")) as f:
            self.model = json.load(f)


if __name__ == "__main__":
    sys.exit(tune_trial.run_trainable(MyTrainableClass))
