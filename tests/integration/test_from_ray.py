"""Coming from Ray Tune: the Python helper's Ray shapes, on real trials."""
import json
import os
import shlex
import signal
import time
import unittest

from harness import PY, TUNE, TuneTest

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


if __name__ == "__main__":
    unittest.main()
