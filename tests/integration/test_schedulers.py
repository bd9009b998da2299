"""Schedulers on real trial processes: asha and hyperband on the digits example (scikit-learn),
and a driver SIGKILLed at random instants of an asha, a hyperband and a median_stopping run
resumes to the same decisions as an uninterrupted run."""
import os
import random
import signal
import time
import unittest

from harness import SOURCE, TuneTest

# A deterministic learning curve: val = q - 1/i at iteration i, one checkpoint per iteration,
# resumed from TUNE_RESTORE_CHECKPOINT; ~40 ms an iteration.
CURVE = """
import json, os, sys, tempfile, time
import tune_trial
cfg = tune_trial.config()
i = 0
ck = tune_trial.get_checkpoint()
if ck:
    with open(os.path.join(ck, "i")) as f:
        i = int(f.read())
while i < 27:
    i += 1
    time.sleep(0.04)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "i"), "w") as f:
            f.write(str(i))
        tune_trial.report({"val": cfg["q"] - 1.0 / i}, checkpoint_dir=d)
"""


def sklearn_missing():
    return not os.path.exists("/usr/lib/python3/dist-packages/sklearn")


class SchedulerTest(TuneTest):
    def digits(self, config, name, *sets):
        args = ["run", os.path.join(SOURCE, "configs", config), "--name", name, "--quiet"]
        for s in sets:
            args += ["--set", s]
        return self.tune(*args, check=0, timeout=400)

    def check_each_iteration_once(self, name):
        for t in self.trials(name):
            self.assertEqual(self.iterations(name, t), list(range(1, t["iteration"] + 1)), t["trial_name"])

    @unittest.skipIf(sklearn_missing(), "python3-sklearn is not installed (scripts/setup.sh --test)")
    def test_asha_on_digits_stops_the_weak_trials_early(self):
        self.digits("asha_digits.yaml", "asha", "num_samples=10", "param_space.epochs=9", "scheduler.max_t=9")
        trials = self.trials("asha")
        self.assertEqual(len(trials), 10)
        self.assertTrue(all(t["status"] == "TERMINATED" for t in trials))
        stopped = [t for t in trials if t["reason"] == "stopped" and t["cause"] == "cutoff"]
        self.assertGreater(len(stopped), 0)
        self.assertLess(sum(t["iteration"] for t in trials), 10 * 9)
        for t in stopped:
            self.assertIn(t["iteration"], (1, 3))
            last = self.results("asha", t)[-1]
            self.assertEqual(last["decision"], "stopped by asha at %d" % t["iteration"])
        best = max(t["metrics"]["val_acc"]["max"] for t in trials)
        self.assertGreater(best, 0.9)  # it learned something
        self.check_each_iteration_once("asha")
        status = self.tune("status", "asha", check=0).stdout
        self.assertIn("stopped by asha at", status)

    @unittest.skipIf(sklearn_missing(), "python3-sklearn is not installed (scripts/setup.sh --test)")
    def test_hyperband_on_digits_pauses_and_resumes_from_checkpoints(self):
        self.digits("hyperband_digits.yaml", "hb", "num_samples=9", "param_space.epochs=9", "scheduler.max_t=9")
        trials = self.trials("hb")
        self.assertEqual(len(trials), 9)
        self.assertTrue(all(t["status"] == "TERMINATED" for t in trials))
        # Bracket 2 of max_t 9, rf 3: 9 trials from 1 epoch, 3 go on to 3, 1 to 9.
        self.assertEqual(sorted(t["iteration"] for t in trials), [1] * 6 + [3, 3, 9])
        # Paused at a rung, then resumed from a checkpoint (the trial that completes a rung and
        # is among the best goes on without a pause).
        resumed = [t for t in trials if t["attempt"] > 1]
        self.assertGreaterEqual(len(resumed), 2)
        self.assertTrue(all(t["iteration"] >= 3 for t in resumed))
        self.check_each_iteration_once("hb")

    def run_curve(self, name, scheduler, kills):
        """Runs the curve experiment, SIGKILLing the driver after each delay in `kills` and
        resuming; returns each trial's (iteration, status, reason, cause, decided_at)."""
        self.write("curve.py", CURVE)
        path = self.write(name + ".yaml", """
            name: %s
            trial: {command: ["python3", "curve.py"], env: {PYTHONUNBUFFERED: "1"}}
            param_space: {q: {grid_search: [0.4, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.5]}}
            metric: val
            mode: max
            max_concurrent_trials: 1
            seed: 3
            scheduler: %s
            checkpoint_config: {num_to_keep: 2}
            """ % (name, scheduler))
        for delay in kills:
            p = self.start_tune("run", path, "--resume=auto", "--quiet")
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.communicate()
        self.tune("run", path, "--resume=auto", "--quiet", check=0, timeout=300)
        self.check_each_iteration_once(name)
        return {t["config"]["q"]: (t["iteration"], t["status"], t["reason"], t["cause"], t["decided_at"])
                for t in self.trials(name)}

    def test_a_driver_killed_at_random_instants_resumes_to_the_same_asha_decisions(self):
        sched = "{type: asha, max_t: 27, grace_period: 1, reduction_factor: 3}"
        straight = self.run_curve("asha-straight", sched, [])
        self.assertIn(("stopped", "cutoff"), [(v[2], v[3]) for v in straight.values()])
        rng = random.Random(int(os.environ.get("TUNE_TEST_SEED", time.time())))
        kills = [rng.uniform(0.3, 2.5) for _ in range(3)]
        self.assertEqual(self.run_curve("asha-killed", sched, kills), straight, "kills %s" % kills)

    def test_a_driver_killed_at_random_instants_resumes_to_the_same_hyperband_decisions(self):
        sched = "{type: hyperband, max_t: 9, reduction_factor: 3}"
        straight = self.run_curve("hb-straight", sched, [])
        self.assertEqual(sorted(v[0] for v in straight.values()), [1] * 6 + [3, 3, 9])
        rng = random.Random(int(os.environ.get("TUNE_TEST_SEED", time.time())))
        kills = [rng.uniform(0.3, 2.5) for _ in range(3)]
        self.assertEqual(self.run_curve("hb-killed", sched, kills), straight, "kills %s" % kills)

    def test_a_driver_killed_at_random_instants_resumes_to_the_same_median_decisions(self):
        # median_stopping's results go to .tune/scheduler.log at each state write: a resume reads
        # the log up to what the state counts, then the state's own part.
        sched = "{type: median_stopping, grace_period: 3, min_samples_required: 2}"
        straight = self.run_curve("med-straight", sched, [])
        self.assertIn(("stopped", "median"), [(v[2], v[3]) for v in straight.values()])
        log = os.path.join(self.storage, "med-straight", ".tune", "scheduler.log")
        self.assertGreater(os.path.getsize(log), 0)
        rng = random.Random(int(os.environ.get("TUNE_TEST_SEED", time.time())))
        kills = [rng.uniform(0.3, 2.5) for _ in range(3)]
        self.assertEqual(self.run_curve("med-killed", sched, kills), straight, "kills %s" % kills)

    def test_a_time_attr_no_result_has_is_named_once(self):
        # Ray's rule: a result without the time_attr changes nothing. Silent, a misspelt key
        # turns the scheduler off for the whole run; the driver says so once.
        self.write("four.sh", """
            for i in 1 2 3 4; do echo '{"val": '$i'}'; done
            """)
        path = self.write("no-epoch.yaml", """
            name: no-epoch
            trial: {command: ["sh", "four.sh"]}
            param_space: {q: {grid_search: [1, 2, 3]}}
            metric: val
            mode: max
            scheduler: {type: asha, time_attr: epoch, max_t: 4}
            """)
        self.tune("run", path, "--quiet", check=0)
        with open(os.path.join(self.exp_dir("no-epoch"), "tune.log")) as f:
            log = f.read()
        said = [l for l in log.splitlines() if "without 'epoch'" in l]
        self.assertEqual(len(said), 1, log)
        self.assertIn("asha needs time_attr 'epoch'", said[0])
        self.assertEqual([t["status"] for t in self.trials("no-epoch")], ["TERMINATED"] * 3)
        for t in self.trials("no-epoch"):
            self.assertEqual(self.iterations("no-epoch", t), [1, 2, 3, 4])


if __name__ == "__main__":
    unittest.main()
