"""Coming from Ray Tune: Ray's names and layout, the ranking order of checkpoints, nested
metrics, resume values and hints, and the Python helper's Ray shapes, on real trials."""
import json
import os
import shlex
import signal
import time
import unittest

from harness import PY, SOURCE, TUNE, TuneTest

# Reports (val/acc, loss) pairs given as "acc:loss,acc:loss", each with a checkpoint.
NESTED = """
import os, sys, tempfile, tune_trial
for pair in sys.argv[1].split(","):
    acc, loss = (float(x) for x in pair.split(":"))
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "acc"), "w").write(str(acc))
        tune_trial.report({"val": {"acc": acc}, "loss": loss},
                          checkpoint=tune_trial.Checkpoint.from_directory(d))
"""


class FromRayTest(TuneTest):
    def ckpt_acc(self, path):
        with open(os.path.join(path, "acc")) as f:
            return float(f.read())

    def test_ray_layout_and_names_rank_by_the_score_attribute(self):
        self.write("nested.py", NESTED)
        self.write("exp.yaml", """
            trial: {command: ["%s", "nested.py", "0.5:0.1,0.9:0.5,0.7:0.3"]}
            param_space: {x: 1}
            keep_checkpoints_num: 2
            checkpoint_score_attr: max-val/acc
            tune_config: {metric: loss, mode: min}
            run_config: {name: ported}
        """ % PY)
        p = self.tune("run", "exp.yaml", "--quiet", check=0)
        self.assertIn("exp.yaml:3:1: 'keep_checkpoints_num' is Ray's name: use "
                      "'checkpoint_config.num_to_keep'", p.stderr)
        self.assertIn("'checkpoint_score_attr' is Ray's name: use "
                      "'checkpoint_config.checkpoint_score_attribute'", p.stderr)
        t = self.trials("ported")[0]
        d = os.path.join(self.exp_dir("ported"), t["trial_name"])
        # Retention by max val/acc (the nested metric, flattened) keeps 0.9 and 0.7.
        self.assertEqual(sorted(x for x in os.listdir(d) if x.startswith("checkpoint_")),
                         ["checkpoint_000002", "checkpoint_000003"])
        # result.json keeps what the trial wrote; the metric stats see it flattened.
        self.assertEqual(self.results("ported", t)[0]["val"], {"acc": 0.5})
        self.assertEqual(t["metrics"]["val/acc"]["max"], 0.9)
        # checkpoint_config's score attribute and order rank before the experiment's metric.
        best = self.tune("checkpoints", "best", "ported", check=0).stdout.strip()
        self.assertEqual(self.ckpt_acc(best), 0.9)
        ls = json.loads(self.tune("checkpoints", "ls", "ported", "--format", "json", check=0).stdout)
        self.assertEqual([r["metric"] for r in ls], ["val/acc", "val/acc"])
        self.assertEqual([r["score"] for r in ls], [0.9, 0.7])
        # --metric/--mode first: the lowest loss among the kept ones.
        best = self.tune("checkpoints", "best", "ported", "--metric", "loss", "--mode", "min",
                         check=0).stdout.strip()
        self.assertEqual(self.ckpt_acc(best), 0.7)

    def test_without_a_score_attribute_the_experiment_metric_and_mode_rank(self):
        self.write("nested.py", NESTED)
        self.write("exp.yaml", """
            trial: {command: ["%s", "nested.py", "0.5:0.1,0.9:0.5,0.7:0.3"]}
            param_space: {x: 1}
            metric: val/acc
            mode: max
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        best = self.tune("checkpoints", "best", "exp", check=0).stdout.strip()
        self.assertEqual(self.ckpt_acc(best), 0.9)  # max, not the lowest accuracy

    def test_metric_without_mode_is_a_config_error(self):
        self.write("exp.yaml", """
            trial: {command: ["true"]}
            param_space: {x: 1}
            metric: acc
        """)
        p = self.tune("run", "exp.yaml", check=2)
        self.assertIn("exp.yaml:3:9: metric 'acc' needs a mode", p.stderr)
        self.assertFalse(os.path.exists(self.exp_dir("exp")))

    def test_a_nested_metric_meets_a_stop_rule(self):
        self.write("climb.py", """
            import tune_trial
            for i in range(1, 50):
                tune_trial.report({"val": {"acc": i / 10}})
        """)
        self.write("exp.yaml", """
            trial: {command: ["%s", "climb.py"]}
            param_space: {x: 1}
            stop: {val/acc: 0.3}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        t = self.trials("exp")[0]
        self.assertEqual(self.iterations("exp", t), [1, 2, 3])

    def test_resume_values_in_any_case(self):
        self.write("exp.yaml", """
            trial: {command: ["true"]}
            param_space: {x: 1}
        """)
        self.tune("run", "exp.yaml", "--resume=AUTO", "--quiet", check=0)
        p = self.tune("run", "exp.yaml", "--resume=Auto", check=0)
        self.assertIn("(resuming)", open(os.path.join(self.exp_dir("exp"), "tune.log")).read())
        self.tune("run", "exp.yaml", "--resume=MUST", "--quiet", check=0)
        p = self.tune("run", "exp.yaml", "--resume=sometimes", check=2)
        self.assertIn("--resume", p.stderr)

    def test_the_resume_hint_repeats_name_set_and_storage_path(self):
        # Waits for a flag file (so it is interrupted the first time and ends on resume).
        self.write("wait.py", """
            import os, sys, time, tune_trial
            flag = sys.argv[1]
            while not os.path.exists(flag):
                time.sleep(0.05)
            tune_trial.report({"n": tune_trial.config()["n"]})
        """)
        self.write("exp.yaml", """
            trial: {command: ["%s", "wait.py", "%s"]}
            param_space: {n: 1}
        """ % (PY, os.path.join(self.dir, "flag")))
        other = os.path.join(self.dir, "elsewhere")
        proc = self.start_tune("run", "exp.yaml", "--name", "renamed", "--set", "param_space.n=7",
                               "--storage-path", other, "--quiet")
        state = os.path.join(other, "renamed", "experiment_state.json")
        self.wait_for(lambda: any(t["status"] == "RUNNING" for t in json.load(open(state))["trials"]),
                      what="the trial to run")
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, err)
        hint = [l for l in out.splitlines() if l.startswith("interrupted: resume with: ")]
        self.assertEqual(len(hint), 1, out)
        argv = shlex.split(hint[0][len("interrupted: resume with: "):])
        self.assertEqual(argv[:2], ["tune", "run"])
        self.assertIn("--set", argv)
        self.assertEqual(argv[argv.index("--set") + 1], "param_space.n=7")
        self.assertEqual(argv[argv.index("--name") + 1], "renamed")
        self.assertEqual(argv[argv.index("--storage-path") + 1], other)
        # The hint, as printed, resumes the same experiment.
        open(os.path.join(self.dir, "flag"), "w").close()
        self.tune(*argv[1:], "--quiet", check=0)
        with open(state) as f:
            t = json.load(f)["trials"][0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(t["last_result"]["n"], 7)

    def test_restart_errored_starts_failed_trials_from_scratch(self):
        # Checkpoints at 1 and 2, then fails unless the flag exists; says where it started.
        self.write("flaky.py", """
            import os, sys, tempfile, tune_trial
            ck = tune_trial.get_checkpoint()
            start = int(open(os.path.join(ck, "i")).read()) if ck else 0
            for i in range(start + 1, 4):
                if i == 3 and not os.path.exists(sys.argv[1]):
                    sys.exit(3)
                with tempfile.TemporaryDirectory() as d:
                    open(os.path.join(d, "i"), "w").write(str(i))
                    tune_trial.report({"i": i, "start": start}, checkpoint_dir=d)
        """)
        self.write("exp.yaml", """
            trial: {command: ["%s", "flaky.py", "%s"]}
            param_space: {x: 1}
        """ % (PY, os.path.join(self.dir, "flag")))
        self.tune("run", "exp.yaml", "--quiet", check=1)
        self.assertEqual(self.trials("exp")[0]["status"], "ERROR")
        open(os.path.join(self.dir, "flag"), "w").close()
        self.tune("run", "exp.yaml", "--resume=RESTART_ERRORED", "--quiet", check=0)
        t = self.trials("exp")[0]
        self.assertEqual(t["status"], "TERMINATED")
        rows = self.results("exp", t)
        self.assertEqual([r["i"] for r in rows], [1, 2, 3])  # from scratch, not from i=2
        self.assertEqual({r["start"] for r in rows}, {0})
        d = os.path.join(self.exp_dir("exp"), t["trial_name"])
        # The earlier attempt's checkpoints are gone; the new ones are numbered after them.
        self.assertEqual(sorted(x for x in os.listdir(d) if x.startswith("checkpoint_")),
                         ["checkpoint_000003", "checkpoint_000004", "checkpoint_000005"])


class WarmStartTest(TuneTest):
    def test_restore_from_starts_each_trial_until_it_has_its_own_checkpoint(self):
        pre = os.path.join(self.dir, "pretrained")
        os.makedirs(pre)
        with open(os.path.join(pre, "w"), "w") as f:
            f.write("41")
        # Attempt 1 of each trial: reads the warm start, checkpoints once, then fails; the retry
        # must get the trial's own checkpoint, not the warm start again.
        self.write("warm.py", """
            import os, sys, tempfile, tune_trial
            ck = tune_trial.get_checkpoint()
            w = int(open(os.path.join(ck, "w")).read())
            tune_trial.report({"w": w, "from": os.path.basename(ck), "path": str(ck)})
            if not os.path.basename(ck).startswith("checkpoint_"):
                with tempfile.TemporaryDirectory() as d:
                    open(os.path.join(d, "w"), "w").write(str(w + 100))
                    tune_trial.report({"w": w}, checkpoint_dir=d)
                sys.exit(1)
        """)
        self.write("exp.yaml", """
            trial: {command: ["%s", "warm.py"], restore_from: pretrained}
            param_space: {x: {grid_search: [1, 2]}}
            failure_config: {max_failures: 1}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        with open(os.path.join(pre, "w")) as f:
            self.assertEqual(f.read(), "41")
        for t in self.trials("exp"):
            rows = self.results("exp", t)
            self.assertEqual(rows[0]["path"],  # the head's copy, not the original
                             os.path.join(self.exp_dir("exp"), ".tune", "restore_from"))
            self.assertEqual(rows[0]["w"], 41)
            self.assertEqual(rows[-1]["from"], "checkpoint_000001")
            self.assertEqual(rows[-1]["w"], 141)

    def test_restore_from_must_be_a_directory(self):
        self.write("exp.yaml", """
            trial: {command: ["true"], restore_from: missing}
            param_space: {x: 1}
        """)
        p = self.tune("run", "exp.yaml", check=2)
        self.assertIn("exp.yaml:1:42: trial.restore_from", p.stderr)


class PythonHelperRayShapesTest(TuneTest):
    def test_dict_checkpoints_get_checkpoint_and_context_across_a_retry(self):
        # First attempt: two results with Checkpoint.from_dict, then a crash; the retry reads
        # the dict back through get_checkpoint() (also usable as a path string).
        self.write("dicts.py", """
            import os, sys, tune_trial
            ctx = tune_trial.get_context()
            ck = tune_trial.get_checkpoint()
            start = ck.to_dict()["step"] if ck else 0
            as_path = os.path.isfile(os.path.join(ck, "dict_checkpoint.pkl")) if ck else None
            with (ck.as_directory() if ck else open(os.devnull)) as d:
                same_dir = (d == ck.path) if ck else None
            for step in range(start + 1, 4):
                if step == 3 and not ck:
                    sys.exit(5)
                tune_trial.report({"step": step, "start": start, "as_path": as_path,
                                   "same_dir": same_dir, "id": ctx.get_trial_id(),
                                   "name": ctx.get_trial_name(), "dir": ctx.get_trial_dir()},
                                  checkpoint=tune_trial.Checkpoint.from_dict({"step": step}))
        """)
        self.write("exp.yaml", """
            trial: {command: ["%s", "dicts.py"]}
            param_space: {x: 1}
            failure_config: {max_failures: 1}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        t = self.trials("exp")[0]
        rows = self.results("exp", t)
        self.assertEqual([r["step"] for r in rows], [1, 2, 3])
        self.assertEqual(rows[-1]["start"], 2)
        self.assertTrue(rows[-1]["as_path"])
        self.assertTrue(rows[-1]["same_dir"])
        self.assertEqual(rows[0]["id"], t["trial_id"])
        self.assertEqual(rows[0]["name"], t["trial_name"])
        self.assertEqual(rows[0]["dir"], os.path.join(self.exp_dir("exp"), t["trial_name"]))
        # from_dict's temporary directories were removed once copied into the trial dir.
        import glob, tempfile
        self.assertEqual([d for d in glob.glob(os.path.join(tempfile.gettempdir(), "tune_dict_checkpoint_*"))
                          if os.path.getmtime(d) > time.time() - 60 and os.listdir(d)], [])

    def test_step_mode_trainable_with_ray_class_api(self):
        # save_checkpoint returns a dict (Ray's older style): load_checkpoint gets it back.
        self.write("trainable.py", """
            import os, sys, tune_trial

            class Counter(tune_trial.Trainable):
                def setup(self, config):
                    self.total = 0
                    self.restored = None
                    self.first = not os.path.exists(os.path.join(self.trial_dir, "crashed"))

                def step(self):
                    if self.first and self.iteration == 2:
                        open(os.path.join(self.trial_dir, "crashed"), "w").close()
                        raise RuntimeError("boom")
                    self.total += self.config["inc"]
                    return {"total": self.total, "restored": self.restored, "iter": self.iteration,
                            "tid": self.trial_id}

                def save_checkpoint(self, checkpoint_dir):
                    return {"total": self.total}

                def load_checkpoint(self, checkpoint):
                    self.total = checkpoint["total"]
                    self.restored = checkpoint["total"]

            sys.exit(tune_trial.run_trainable(Counter))
        """)
        self.write("exp.yaml", """
            trial: {command: ["%s", "trainable.py"], mode: step}
            param_space: {inc: 2}
            stop: {training_iteration: 4}
            checkpoint_config: {checkpoint_frequency: 1}
            failure_config: {max_failures: 1}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        t = self.trials("exp")[0]
        rows = self.results("exp", t)
        self.assertEqual([r["training_iteration"] for r in rows], [1, 2, 3, 4])
        self.assertEqual([r["total"] for r in rows], [2, 4, 6, 8])
        self.assertEqual([r["restored"] for r in rows], [None, None, 4, 4])
        self.assertEqual(rows[0]["tid"], t["trial_id"])


class FromRayExamplesTest(TuneTest):
    """configs/from_ray: the seed documents' examples that have an equivalent here, run."""

    def run_example(self, name):
        path = os.path.join(SOURCE, "configs", "from_ray", name)
        return self.tune("run", path, "--storage-path", self.storage, "--quiet", check=0, timeout=240)

    def test_function_checkpoint(self):
        self.run_example("function_checkpoint.yaml")
        for t in self.trials("from-ray-function-checkpoint"):
            rows = self.results("from-ray-function-checkpoint", t)
            self.assertEqual([r["epoch"] for r in rows], list(range(1, 13)))
            self.assertEqual([c["iteration"] for c in t["checkpoints"]], [3, 6, 9, 12])
        best = self.tune("checkpoints", "best", "from-ray-function-checkpoint", check=0).stdout.strip()
        with open(os.path.join(best, "checkpoint.json")) as f:
            self.assertAlmostEqual(json.load(f)["weight"], 2.4)  # lr 0.2 x 12 epochs, by max

    def test_class_trainable(self):
        self.run_example("class_trainable.yaml")
        t = self.trials("from-ray-class-trainable")[0]
        self.assertEqual(t["iteration"], 2)
        self.assertEqual([c["iteration"] for c in t["checkpoints"]], [2])
        best = self.tune("checkpoints", "best", "from-ray-class-trainable", check=0).stdout.strip()
        with open(os.path.join(best, "model.json")) as f:
            self.assertEqual(len(json.load(f)), 64)

    def test_keep_best(self):
        self.run_example("keep_best.yaml")
        best = self.tune("checkpoints", "best", "from-ray-keep-best", check=0).stdout.strip()
        self.assertTrue(best.endswith("checkpoint_000003"), best)
        t = self.trials("from-ray-keep-best")[0]
        self.assertEqual([c["dir"] for c in t["checkpoints"]], ["checkpoint_000001", "checkpoint_000003"])

    def test_checkpoint_guide_with_ray_names(self):
        p = self.run_example("checkpoint_guide.yaml")
        self.assertEqual(p.stderr.count("is Ray's name"), 3, p.stderr)
        self.assertIn("use 'syncer: none'", p.stderr)
        for t in self.trials("my-tune-exp"):
            self.assertEqual(len(t["checkpoints"]), 5)
            steps = {c["iteration"] for c in t["checkpoints"]}
            self.assertLessEqual({4, 5, 6, 7}, steps)  # the best AUCs (peak at steps 5-6)
            self.assertFalse(steps & {1, 2, 9, 10})
        self.tune("run", os.path.join(SOURCE, "configs", "from_ray", "checkpoint_guide.yaml"),
                  "--storage-path", self.storage, "--resume=AUTO", "--quiet", check=0)
        self.assertIn("(resuming)", open(os.path.join(self.exp_dir("my-tune-exp"), "tune.log")).read())


if __name__ == "__main__":
    unittest.main()
