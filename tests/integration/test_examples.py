"""The shipped example experiments run as the README says (quickstart, Python, step mode)."""
import json
import os
import shutil
import unittest

from harness import SOURCE, TuneTest


class ExamplesTest(TuneTest):
    def run_config(self, name):
        return self.tune("run", os.path.join(SOURCE, "configs", name), "--quiet", check=0, timeout=240)

    def test_quickstart(self):
        p = self.run_config("quickstart.yaml")
        self.assertIn("8 TERMINATED", p.stdout)
        self.assertIn("best trial: trial_", p.stdout)
        trials = self.trials("quickstart")
        self.assertEqual(len(trials), 8)
        for t in trials:
            self.assertEqual(t["iteration"], 30)
            self.assertEqual(len(t["checkpoints"]), 2)
            self.assertLess(t["metrics"]["val_loss"]["min"], 0.69)  # it learned something
        ls = self.tune("checkpoints", "ls", "quickstart", check=0).stdout
        self.assertIn("checkpoint_", ls)
        best = self.tune("checkpoints", "best", "quickstart", check=0).stdout.strip()
        with open(os.path.join(best, "weights.txt")) as f:
            self.assertEqual(len(f.read().split()), 34)  # epoch + 32 weights + bias

    def test_python_example(self):
        self.run_config("python_example.yaml")
        trials = self.trials("python-sgd")
        self.assertEqual(len(trials), 6)
        self.assertTrue(all(t["status"] == "TERMINATED" and len(t["checkpoints"]) == 1 for t in trials))

    def test_step_example(self):
        self.run_config("step_example.yaml")
        for t in self.trials("python-step"):
            self.assertEqual(t["iteration"], 20)
            its = [c["iteration"] for c in t["checkpoints"]]
            self.assertEqual(len(its), 2)   # num_to_keep: 2, the most recent
            self.assertEqual(its[-1], 20)   # checkpoint_at_end


if __name__ == "__main__":
    unittest.main()
