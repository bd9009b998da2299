"""Hundreds of short trials that fail, retry, are interrupted and resume: what users run, and
what once crashed the driver every time. CI runs this against the ASan+UBSan build of `tune`
(TUNE_BIN=build-asan/tune), so a memory error anywhere on these paths fails it."""
import os
import signal
import unittest

from harness import PY, TuneTest

# Fails its first attempt at iteration 2; checkpoints every iteration; restores.
TRIAL = """
import json, os, sys, tempfile, time
d = os.environ["TUNE_TRIAL_DIR"]
ck = os.environ.get("TUNE_RESTORE_CHECKPOINT")
start = int(open(os.path.join(ck, "i")).read()) if ck else 0
for i in range(start + 1, 4):
    if i == 2 and not os.path.exists(os.path.join(d, "failed")):
        open(os.path.join(d, "failed"), "w").close()
        sys.exit(1)
    c = tempfile.mkdtemp(dir=d)
    open(os.path.join(c, "i"), "w").write(str(i))
    print(json.dumps({"i": i, "loss": 1.0 / i, "checkpoint": c}), flush=True)
    time.sleep(0.01)
"""


class ScaleTest(TuneTest):
    def test_300_trials_fail_retry_interrupt_resume(self):
        self.write("t.py", TRIAL)
        self.write("exp.yaml", """
            name: scale
            trial: {command: ["%s", "t.py"]}
            param_space: {x: {grid_search: [%s]}}
            num_samples: 5
            seed: 11
            max_concurrent_trials: 4
            failure_config: {max_failures: 1}
            checkpoint_config: {num_to_keep: 1, checkpoint_score_attribute: loss,
                                checkpoint_score_order: min}
        """ % (PY, ", ".join(str(i) for i in range(60))))
        p = self.start_tune("run", "exp.yaml", "--quiet")

        def far_enough():
            st = self.state("scale")
            return sum(t["status"] == "TERMINATED" for t in st["trials"]) >= 40
        self.wait_for(far_enough, timeout=300, what="40 trials done")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        self.assertNotIn("Sanitizer", err)
        self.assertEqual(p.returncode, 130, err[-3000:])
        r = self.tune("run", "exp.yaml", "--resume=auto", "--quiet", timeout=900)
        self.assertNotIn("Sanitizer", r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trials = self.trials("scale")
        self.assertEqual(len(trials), 300)
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            # A trial that Ctrl-C stopped as it was failing is interrupted, not failed: 0 or 1.
            self.assertIn(t["failures"], (0, 1), t["trial_name"])
            rows = self.results("scale", t)
            self.assertEqual([x["training_iteration"] for x in rows], [1, 2, 3], t["trial_name"])
            self.assertEqual([x["i"] for x in rows], [1, 2, 3], t["trial_name"])
            self.assertEqual([c["dir"] for c in t["checkpoints"]], ["checkpoint_%06d" % t["checkpoint_seq"]])
            names = [n for n in os.listdir(os.path.join(self.exp_dir("scale"), t["trial_name"]))
                     if "checkpoint" in n]
            self.assertEqual(names, [t["checkpoints"][0]["dir"]])
        self.assertGreaterEqual(sum(t["failures"] == 1 for t in trials), 250)


def variant(text, *changes):
    """TRIAL with (old, new) replacements, each of which must apply."""
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return text


# The same, but each checkpoint is written in the workdir, so the driver copies it in on its
# file worker (not a rename): a kill -9 finds copies under way.
COPIED_TRIAL = variant(TRIAL, ("c = tempfile.mkdtemp(dir=d)",
                              "c = tempfile.mkdtemp(dir=os.path.join(os.getcwd(), 'cks'))"))


class CopiedCheckpointsScaleTest(TuneTest):
    def test_200_trials_whose_checkpoints_are_copied_in_survive_a_kill_9(self):
        self.write("t.py", COPIED_TRIAL)
        os.makedirs(os.path.join(self.dir, "cks"))
        self.write("exp.yaml", """
            name: copied
            trial: {command: ["%s", "t.py"], workdir: "%s"}
            param_space: {x: {grid_search: [%s]}}
            num_samples: 5
            seed: 12
            max_concurrent_trials: 4
            failure_config: {max_failures: 1}
            checkpoint_config: {num_to_keep: 1}
        """ % (PY, self.dir, ", ".join(str(i) for i in range(40))))
        # Each copy waits 0.1 s first (a test-only delay; the trials make checkpoints faster
        # than that, so copies queue up), and the state is written every 0.1 s: the kill comes
        # right after a state that names copies under way, and the state it leaves names some.
        env = dict(self.env, TUNE_TEST_ADOPT_DELAY_S="0.1", TUNE_GLOBAL_CHECKPOINT_S="0.1")
        p = self.start_tune("run", "exp.yaml", "--quiet", env=env)

        def far_enough():
            st = self.state("copied")
            return sum(t["status"] == "TERMINATED" for t in st["trials"]) >= 60 and any(
                t.get("adopting") for t in st["trials"])
        self.wait_for(far_enough, timeout=300, what="60 trials done, copies under way")
        p.kill()
        out, err = p.communicate(timeout=60)
        self.assertNotIn("Sanitizer", err)
        self.assertTrue(any(t.get("adopting") for t in self.trials("copied")),
                        "the kill left no copy under way: nothing to test")
        r = self.tune("run", "exp.yaml", "--resume=auto", "--quiet", timeout=900)
        self.assertNotIn("Sanitizer", r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trials = self.trials("copied")
        self.assertEqual(len(trials), 200)
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertIn(t["failures"], (0, 1), t["trial_name"])
            self.assertNotIn("adopting", t, t["trial_name"])
            rows = self.results("copied", t)
            self.assertEqual([x["training_iteration"] for x in rows], [1, 2, 3], t["trial_name"])
            self.assertEqual([x["i"] for x in rows], [1, 2, 3], t["trial_name"])
            # The newest checkpoint is kept (keep 1), complete, and holds what it says.
            self.assertEqual([c["iteration"] for c in t["checkpoints"]], [3], t["trial_name"])
            ck = os.path.join(self.exp_dir("copied"), t["trial_name"], t["checkpoints"][0]["dir"])
            with open(os.path.join(ck, "i")) as f:
                self.assertEqual(f.read(), "3", t["trial_name"])
        # Every trial failed once at iteration 2 and went on from its checkpoint at 1.
        self.assertEqual(sum(t["failures"] == 1 for t in trials), 200)


# For HyperBand: the same, up to iteration 9, with a loss that depends on x (so that the rungs
# have something to rank). `i` is its own count.
HYPERBAND_TRIAL = variant(
    TRIAL,
    ('d = os.environ["TUNE_TRIAL_DIR"]',
     'd = os.environ["TUNE_TRIAL_DIR"]\nx = json.loads(os.environ["TUNE_CONFIG"])["x"]'),
    ("range(start + 1, 4)", "range(start + 1, 10)"),
    ('"loss": 1.0 / i', '"loss": (x % 7 + 1.0) / i'))


class HyperbandScaleTest(TuneTest):
    def test_200_hyperband_trials_pause_fail_resume_after_a_kill_9(self):
        self.write("t.py", HYPERBAND_TRIAL)
        self.write("exp.yaml", """
            name: hb
            trial: {command: ["%s", "t.py"]}
            param_space: {x: {grid_search: [%s]}}
            num_samples: 5
            seed: 13
            metric: loss
            mode: min
            max_concurrent_trials: 4
            scheduler: {type: hyperband, max_t: 9, reduction_factor: 3}
            failure_config: {max_failures: 1}
            checkpoint_config: {num_to_keep: 1}
        """ % (PY, ", ".join(str(i) for i in range(40))))
        p = self.start_tune("run", "exp.yaml", "--quiet")

        def far_enough():
            st = self.state("hb")["trials"]
            return len(st) >= 60 and any(t["status"] == "PAUSED" for t in st)
        self.wait_for(far_enough, timeout=300, what="60 trials, some paused")
        p.kill()
        out, err = p.communicate(timeout=60)
        self.assertNotIn("Sanitizer", err)
        r = self.tune("run", "exp.yaml", "--resume=auto", "--quiet", timeout=900)
        self.assertNotIn("Sanitizer", r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trials = self.trials("hb")
        self.assertEqual(len(trials), 200)
        longest = 0
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertIn(t["failures"], (0, 1), t["trial_name"])
            rows = self.results("hb", t)
            its = [x["training_iteration"] for x in rows]
            # Each iteration once, in order, and the trial's own count agrees: every pause,
            # failure and kill went on from the right checkpoint.
            self.assertEqual(its, list(range(1, len(its) + 1)), t["trial_name"])
            self.assertEqual([x["i"] for x in rows], its, t["trial_name"])
            longest = max(longest, len(its))
            for c in t["checkpoints"]:
                self.assertTrue(os.path.isdir(os.path.join(
                    self.exp_dir("hb"), t["trial_name"], c["dir"])), t["trial_name"])
        self.assertEqual(longest, 9)
        stopped = sum(t["reason"] == "stopped" for t in trials)
        self.assertGreater(stopped, 50, "hyperband stopped few trials at its rungs")


if __name__ == "__main__":
    unittest.main()
