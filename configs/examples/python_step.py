"""Step-mode example: a Trainable the driver steps, saves and stops over stdin."""
import json
import math
import os

import tune_trial


class Quadratic(tune_trial.Trainable):
    """Gradient descent on f(x) = (x - target)^2 + noise-free curvature term."""

    def setup(self, config):
        self.x = 5.0
        self.lr = config["lr"]
        self.target = config["target"]

    def step(self):
        grad = 2 * (self.x - self.target)
        self.x -= self.lr * grad
        loss = (self.x - self.target) ** 2
        print("x is now", self.x)  # goes to stderr: never confused with a protocol reply
        return {"loss": loss, "x": self.x, "should_checkpoint": loss < 1e-3 and not math.isnan(loss)}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "x.json"), "w") as f:
            json.dump({"x": self.x}, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "x.json")) as f:
            self.x = json.load(f)["x"]


if __name__ == "__main__":
    raise SystemExit(tune_trial.run_trainable(Quadratic))
