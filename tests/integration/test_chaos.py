"""Crash the driver with SIGKILL at seeded random instants and resume it each time: the
experiment must end exactly as an uninterrupted run of the same seed."""
import json
import os
import random
import signal
import time
import unittest

from harness import PY, SOURCE, TuneTest

TRIAL = os.path.join(SOURCE, "tests", "fixtures", "chaos_trial.py")


class ChaosTest(TuneTest):
    def experiment(self, name):
        return self.write(name + ".yaml", f"""
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{uniform: [0.1, 3.0]}}
              steps: 36
              sleep: 0.06
            num_samples: 8
            seed: 7
            metric: acc
            mode: max
            max_concurrent_trials: 2
            checkpoint_config: {{num_to_keep: 2, checkpoint_score_attribute: acc}}
            """)

    def rows(self, name, trial):
        return [(r["training_iteration"], r["step"], r["acc"]) for r in self.results(name, trial)]

    def check_consistent(self, name):
        """Every trial TERMINATED, each iteration once and aligned with the trial's own step
        count, and the state naming exactly the checkpoints on disk."""
        trials = self.trials(name)
        self.assertEqual(len(trials), 8)
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            rows = self.rows(name, t)
            self.assertEqual([r[0] for r in rows], list(range(1, 37)), t["trial_name"])
            self.assertEqual([r[1] for r in rows], list(range(1, 37)), t["trial_name"])
            on_disk = sorted(d for d in os.listdir(os.path.join(self.exp_dir(name), t["trial_name"]))
                             if d.startswith("checkpoint_"))
            self.assertEqual(sorted(c["dir"] for c in t["checkpoints"]), on_disk, t["trial_name"])
            self.assertEqual(len(on_disk), 2, t["trial_name"])
        return {t["trial_name"]: (self.rows(name, t),
                                  [(c["iteration"], c["metrics"]["acc"]) for c in t["checkpoints"]])
                for t in trials}

    def test_sigkill_the_driver_ten_times(self):
        self.experiment("chaos")
        rng = random.Random(20261122)
        kills = 0
        reattached = 0
        for _ in range(40):
            p = self.start_tune("run", "chaos.yaml", "--resume=auto", "--verbose")
            time.sleep(rng.uniform(0.1, 0.8))
            if p.poll() is not None:
                out, err = p.communicate()
                self.assertEqual(p.returncode, 0, err)
                break
            p.send_signal(signal.SIGKILL)
            out, err = p.communicate()
            reattached += err.count("re-attached")
            kills += 1
            if kills >= 12:
                break
        self.assertGreaterEqual(kills, 10, "the experiment ended before 10 kills")
        self.assertGreater(reattached, 0, "no run re-attached to a live trial")
        self.tune("run", "chaos.yaml", "--resume=auto", check=0, timeout=300)
        crashed = self.check_consistent("chaos")

        self.experiment("calm")
        self.tune("run", "calm.yaml", check=0, timeout=300)
        calm = self.check_consistent("calm")
        self.assertEqual(list(crashed.values()), list(calm.values()))


if __name__ == "__main__":
    unittest.main()
