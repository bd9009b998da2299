"""Step mode over the FIFO with the Python Trainable: the checkpoint schedule and stopping."""
import json
import os
import unittest

from harness import PY, TuneTest


class StepModeTest(TuneTest):
    def test_checkpoint_schedule_3_5_6_9_10(self):
        self.write("stepper.py", """
            import json, os, tune_trial
            class T(tune_trial.Trainable):
                def setup(self, config):
                    self.i = 0
                def step(self):
                    self.i += 1
                    print("noise on stdout that must not break the protocol", {"i": self.i})
                    return {"loss": 1.0 / self.i, "should_checkpoint": self.i == 5}
                def save_checkpoint(self, d):
                    with open(os.path.join(d, "i"), "w") as f:
                        f.write(str(self.i))
                    with open(os.path.join(os.environ["TUNE_TRIAL_DIR"], "saves.txt"), "a") as f:
                        f.write("%d\\n" % self.i)
            raise SystemExit(tune_trial.run_trainable(T))
        """)
        self.write("exp.yaml", """
            name: step
            trial: {command: ["%s", "stepper.py"], mode: step}
            param_space: {x: 1}
            stop: {training_iteration: 10}
            checkpoint_config: {checkpoint_frequency: 3, checkpoint_at_end: true}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0, timeout=60)
        t = self.trials("step")[0]
        self.assertEqual(t["status"], "TERMINATED")
        d = os.path.join(self.exp_dir("step"), t["trial_name"])
        with open(os.path.join(d, "saves.txt")) as f:
            self.assertEqual(f.read().split(), ["3", "5", "6", "9", "10"])
        self.assertEqual([c["iteration"] for c in t["checkpoints"]], [3, 5, 6, 9, 10])
        for c in t["checkpoints"]:
            with open(os.path.join(d, c["dir"], "i")) as f:
                self.assertEqual(int(f.read()), c["iteration"])
        self.assertEqual(self.iterations("step", t), list(range(1, 11)))
        self.assertFalse([x for x in os.listdir(d) if x.startswith(".pending")])

    def test_step_trial_restores_after_a_crash(self):
        self.write("crashy.py", """
            import os, tune_trial
            class T(tune_trial.Trainable):
                def setup(self, config):
                    self.i = 0
                def step(self):
                    self.i += 1
                    if self.i == 5 and not tune_trial.get_checkpoint():
                        os._exit(1)
                    return {"i": self.i}
                def save_checkpoint(self, d):
                    open(os.path.join(d, "i"), "w").write(str(self.i))
                def load_checkpoint(self, d):
                    self.i = int(open(os.path.join(d, "i")).read())
            raise SystemExit(tune_trial.run_trainable(T))
        """)
        self.write("exp.yaml", """
            name: crashy
            trial: {command: ["%s", "crashy.py"], mode: step}
            param_space: {x: 1}
            stop: {training_iteration: 8}
            checkpoint_config: {checkpoint_frequency: 3}
            failure_config: {max_failures: 1}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0, timeout=60)
        t = self.trials("crashy")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(self.iterations("crashy", t), list(range(1, 9)))
        self.assertEqual([r["i"] for r in self.results("crashy", t)], list(range(1, 9)))


if __name__ == "__main__":
    unittest.main()
