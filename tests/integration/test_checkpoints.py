"""Checkpoints end to end: retention on disk, `tune checkpoints best`, hostile paths."""
import json
import os
import unittest

from harness import PY, TuneTest

REPORT = """
import os, sys, tempfile, tune_trial
losses = [float(x) for x in sys.argv[1].split(",")]
for loss in losses:
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "loss"), "w").write(str(loss))
        tune_trial.report({"loss": loss}, checkpoint_dir=d)
"""


class CheckpointTest(TuneTest):
    def test_ray_train_example_keep_2_best_by_min_loss(self):
        self.write("report.py", REPORT)
        self.write("exp.yaml", """
            name: ray
            trial: {command: ["%s", "report.py", "2,4,1,3"]}
            param_space: {x: 1}
            metric: loss
            mode: min
            checkpoint_config: {num_to_keep: 2, checkpoint_score_attribute: loss, checkpoint_score_order: min}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        t = self.trials("ray")[0]
        d = os.path.join(self.exp_dir("ray"), t["trial_name"])
        self.assertEqual(sorted(x for x in os.listdir(d) if x.startswith("checkpoint_")),
                         ["checkpoint_000001", "checkpoint_000003"])
        best = self.tune("checkpoints", "best", "ray", check=0).stdout
        self.assertEqual(best, os.path.join(d, "checkpoint_000003") + "\n")
        with open(os.path.join(best.strip(), "loss")) as f:
            self.assertEqual(f.read(), "1.0")
        # by max, the other one wins
        best_max = self.tune("checkpoints", "best", "ray", "--mode", "max", check=0).stdout.strip()
        self.assertTrue(best_max.endswith("checkpoint_000001"))

    def test_best_with_no_checkpoint_exits_1_and_prints_no_path(self):
        self.write("exp.yaml", """
            name: none
            trial: {command: ["true"]}
            param_space: {x: 1}
        """)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        p = self.tune("checkpoints", "best", "none", check=1)
        self.assertEqual(p.stdout, "")
        self.assertIn("has no checkpoints", p.stderr)
        self.assertEqual(self.tune("checkpoints", "ls", "none", check=0).stdout.count("no checkpoints"), 1)

    def test_hostile_checkpoint_paths_are_refused_and_left_alone(self):
        outside = os.path.join(self.dir, "outside")
        os.makedirs(outside)
        with open(os.path.join(outside, "precious"), "w") as f:
            f.write("keep")
        self.write("hostile.py", """
            import os, tune_trial
            tdir = os.environ["TUNE_TRIAL_DIR"]
            os.symlink(%r, os.path.join(tdir, "link"))
            for p in ["../../outside", "/etc", %r, os.path.join(tdir, "link"), tdir, "/nonexistent"]:
                print('{"loss": 1, "checkpoint": "%%s"}' %% p, flush=True)
        """ % (outside, outside))
        # The workdir is a subdir: what lies in the workdir would be copied, and 'outside' is not
        # in it.
        os.makedirs(os.path.join(self.dir, "work"))
        os.rename(os.path.join(self.dir, "hostile.py"), os.path.join(self.dir, "work", "hostile.py"))
        self.write("exp.yaml", """
            name: hostile
            trial: {command: ["%s", "hostile.py"], workdir: work}
            param_space: {x: 1}
        """ % PY)
        env = dict(self.env, TMPDIR=os.path.join(self.dir, "faketmp"))  # so 'outside' is not in the temp dir
        os.makedirs(env["TMPDIR"])
        self.tune("run", "exp.yaml", "--quiet", check=0, env=env)
        t = self.trials("hostile")[0]
        self.assertEqual(t["checkpoints"], [])
        self.assertEqual(t["iteration"], 6)
        self.assertTrue(os.path.exists(os.path.join(outside, "precious")))
        self.assertTrue(os.path.exists("/etc/passwd"))
        with open(os.path.join(self.exp_dir("hostile"), "tune.log")) as f:
            log = f.read()
        self.assertIn("outside the trial dir, the temp dir and the workdir: refused", log)
        self.assertIn("is a symlink", log)
        self.assertIn("is the trial dir or contains it", log)
        self.assertIn("does not exist", log)

    def test_a_checkpoint_reported_too_early_does_not_hurt_the_driver(self):
        self.write("early.py", """
            import os, sys, tempfile, tune_trial
            d = tempfile.mkdtemp(dir=os.environ["TUNE_TRIAL_DIR"])
            open(os.path.join(d, "part1"), "w").write("1")
            tune_trial.report({"loss": 1.0}, checkpoint_dir=d)
            try:                      # the trial's bug: it keeps writing after handing the dir over
                open(os.path.join(d, "part2"), "w").write("2")
            except OSError as e:
                print("late write failed:", e, file=sys.stderr)
            tune_trial.report({"loss": 0.5})
        """)
        self.write("exp.yaml", """
            name: early
            trial: {command: ["%s", "early.py"]}
            param_space: {x: 1}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        t = self.trials("early")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(t["iteration"], 2)
        d = os.path.join(self.exp_dir("early"), t["trial_name"], "checkpoint_000001")
        self.assertTrue(os.path.exists(os.path.join(d, "part1")))

    def test_retention_survives_a_resume_and_state_names_only_what_exists(self):
        self.write("report.py", REPORT)
        self.write("exp.yaml", """
            name: keep
            trial: {command: ["%s", "report.py", "{losses}"]}
            param_space: {losses: {grid_search: ["5,4,3,2,1", "1,2,3,4,5"]}}
            checkpoint_config: {num_to_keep: 2, checkpoint_score_attribute: loss, checkpoint_score_order: min}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        for t in self.trials("keep"):
            d = os.path.join(self.exp_dir("keep"), t["trial_name"])
            on_disk = sorted(x for x in os.listdir(d) if x.startswith("checkpoint_"))
            self.assertEqual([c["dir"] for c in t["checkpoints"]], on_disk)
            self.assertEqual(len(on_disk), 2)
        rows = json.loads(self.tune("checkpoints", "ls", "keep", "--metric", "loss", "--mode", "min",
                                    "--format", "json", check=0).stdout)
        self.assertEqual([r["score"] for r in rows], [1.0, 1.0, 2.0, 2.0])


if __name__ == "__main__":
    unittest.main()
