"""End to end on the local machine: files on disk, protocol fields, inspection commands."""
import json
import os
import unittest

from harness import PY, TuneTest


TRAIN = """
import os, sys, tempfile, json
import tune_trial
cfg = tune_trial.config()
start = 0
ck = tune_trial.get_checkpoint()
if ck:
    start = int(open(os.path.join(ck, "it")).read())
print("debug: starting at", start, flush=True)
print("to stderr", file=sys.stderr, flush=True)
for i in range(start, 6):
    loss = abs(cfg["lr"] - 0.01) + 1.0 / (i + 1)
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "it"), "w").write(str(i + 1))
        tune_trial.report({"loss": loss, "nested": {"a": i}}, checkpoint_dir=d)
"""

EXP = """
name: e2e
trial:
  command: ["%s", "train.py", "--lr={lr}"]
param_space:
  lr: {loguniform: [1.0e-3, 1.0e-1]}
  width: {grid_search: [8, 16]}
  fixed: {nested: {value: 3}}
num_samples: 2
seed: 5
metric: loss
mode: min
checkpoint_config: {num_to_keep: 2, checkpoint_score_attribute: loss, checkpoint_score_order: min}
""" % PY


class RunTest(TuneTest):
    def test_function_mode_end_to_end(self):
        self.write("train.py", TRAIN)
        self.write("exp.yaml", EXP)
        p = self.tune("run", "exp.yaml", check=0)
        self.assertIn("best trial:", p.stdout)
        self.assertIn("4 TERMINATED", p.stdout)
        exp = self.exp_dir("e2e")
        for f in ("experiment.yaml", "experiment_state.json", "tune.log"):
            self.assertTrue(os.path.exists(os.path.join(exp, f)), f)
        trials = self.trials("e2e")
        self.assertEqual(len(trials), 4)
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED")
            d = os.path.join(exp, t["trial_name"])
            self.assertEqual(self.iterations("e2e", t), [1, 2, 3, 4, 5, 6])
            with open(os.path.join(d, "params.json")) as f:
                self.assertEqual(json.load(f), t["config"])
            self.assertEqual(t["config"]["fixed"], {"nested": {"value": 3}})
            rows = self.results("e2e", t)
            for key in ("training_iteration", "time_this_iter_s", "time_total_s", "timestamp", "date",
                        "trial_id", "hostname", "pid", "iterations_since_restore", "done"):
                self.assertIn(key, rows[-1])
            self.assertGreater(rows[-1]["pid"], 0)
            self.assertEqual(rows[0]["nested"], {"a": 0})
            with open(os.path.join(d, "progress.csv")) as f:
                lines = f.read().splitlines()
            self.assertEqual(len(lines), 7)
            self.assertIn("nested/a", lines[0].split(","))
            with open(os.path.join(d, "stdout.log")) as f:
                self.assertIn("debug: starting at 0", f.read())
            with open(os.path.join(d, "stderr.log")) as f:
                self.assertIn("to stderr", f.read())
            ckpts = sorted(x for x in os.listdir(d) if x.startswith("checkpoint_"))
            self.assertEqual(ckpts, ["checkpoint_000005", "checkpoint_000006"])  # the 2 lowest losses
            self.assertEqual([c["dir"] for c in t["checkpoints"]], ckpts)
            self.assertFalse([x for x in os.listdir(d) if x.startswith(".staged")])
        # names are stable and filesystem-safe
        self.assertTrue(trials[0]["trial_name"].startswith("trial_00000_lr="))

        st = json.loads(self.tune("status", "e2e", "--format", "json", check=0).stdout)
        self.assertEqual([t["status"] for t in st["trials"]], ["TERMINATED"] * 4)
        table = self.tune("status", "e2e", check=0).stdout
        self.assertIn("4 TERMINATED", table)
        ls = self.tune("ls", check=0).stdout
        self.assertIn("e2e", ls)
        ls_json = json.loads(self.tune("ls", "--format", "json", check=0).stdout)
        self.assertEqual(ls_json[0]["counts"], {"TERMINATED": 4})
        best = self.tune("checkpoints", "best", "e2e", check=0).stdout
        self.assertEqual(best.count("\n"), 1)
        self.assertTrue(os.path.isabs(best.strip()) and os.path.isdir(best.strip()))
        rows = json.loads(self.tune("checkpoints", "ls", "e2e", "--format", "json", check=0).stdout)
        self.assertEqual(len(rows), 8)
        self.assertEqual(rows[0]["path"], best.strip())
        self.assertEqual(sorted(r["score"] for r in rows), [r["score"] for r in rows])
        csv = self.tune("checkpoints", "ls", "e2e", "--format", "csv", "--top", "3", check=0).stdout
        self.assertEqual(len(csv.splitlines()), 4)
        self.assertTrue(csv.startswith("rank,trial_id,trial_name,checkpoint,iteration,metric,score,path,on_head,config"))
        one = json.loads(self.tune("checkpoints", "ls", "e2e", "--trial", "00001", "--format", "json", check=0).stdout)
        self.assertEqual({r["trial_id"] for r in one}, {"00001"})
        self.assertEqual(self.tune("checkpoints", "ls", "e2e", "--trial", "nope").returncode, 2)

    def test_validate_is_deterministic_and_starts_nothing(self):
        self.write("train.py", TRAIN)
        self.write("exp.yaml", EXP)
        a = self.tune("validate", "exp.yaml", check=0).stdout
        b = self.tune("validate", "exp.yaml", check=0).stdout
        self.assertEqual(a, b)
        self.assertIn("4 trial(s)", a)
        self.assertIn("trial_00003_", a)
        self.assertFalse(os.path.exists(self.storage))
        j = json.loads(self.tune("validate", "exp.yaml", "--format", "json", "--set", "num_samples=3", check=0).stdout)
        self.assertEqual(j["total_trials"], 6)

    def test_trial_environment_and_cwd(self):
        self.write("work/envdump.py", """
            import json, os
            keys = ["TUNE_TRIAL_ID", "TUNE_TRIAL_NAME", "TUNE_TRIAL_DIR", "TUNE_EXPERIMENT_NAME", "TUNE_CONFIG",
                    "TUNE_CONFIG_FILE", "CUDA_VISIBLE_DEVICES", "MY_VAR"]
            out = {k: os.environ.get(k) for k in keys}
            out["cwd"] = os.getcwd()
            out["restore"] = os.environ.get("TUNE_RESTORE_CHECKPOINT")
            with open(os.path.join(os.environ["TUNE_TRIAL_DIR"], "env.json"), "w") as f:
                json.dump(out, f)
        """)
        self.write("exp.yaml", """
            name: envtest
            trial:
              command: ["%s", "envdump.py"]
              workdir: work
              env: {MY_VAR: hello}
            param_space: {x: {choice: [a]}}
        """ % PY)
        self.tune("run", "exp.yaml", check=0)
        t = self.trials("envtest")[0]
        d = os.path.join(self.exp_dir("envtest"), t["trial_name"])
        with open(os.path.join(d, "env.json")) as f:
            env = json.load(f)
        self.assertEqual(env["TUNE_TRIAL_ID"], "00000")
        self.assertEqual(env["TUNE_TRIAL_NAME"], t["trial_name"])
        self.assertEqual(env["TUNE_TRIAL_DIR"], d)
        self.assertEqual(env["TUNE_EXPERIMENT_NAME"], "envtest")
        self.assertEqual(json.loads(env["TUNE_CONFIG"]), {"x": "a"})
        self.assertEqual(env["TUNE_CONFIG_FILE"], os.path.join(d, "params.json"))
        self.assertEqual(env["CUDA_VISIBLE_DEVICES"], "")
        self.assertEqual(env["MY_VAR"], "hello")
        self.assertEqual(env["cwd"], os.path.join(self.dir, "work"))
        self.assertIsNone(env["restore"])
        self.assertEqual(t["status"], "TERMINATED")  # exited 0 without reporting

    def test_crash_is_retried_from_the_latest_checkpoint(self):
        self.write("crash.py", """
            import os, tempfile, tune_trial
            start = 0
            ck = tune_trial.get_checkpoint()
            if ck:
                start = int(open(os.path.join(ck, "it")).read())
            for i in range(start + 1, 11):
                if i == 7 and not ck:
                    os._exit(3)   # crash after the iteration-5 checkpoint
                d = None
                if i == 5:
                    d = tempfile.mkdtemp()
                    open(os.path.join(d, "it"), "w").write(str(i))
                tune_trial.report({"loss": 1.0 / i, "restored_from": start}, checkpoint_dir=d)
        """)
        self.write("exp.yaml", """
            name: crash
            trial: {command: ["%s", "crash.py"]}
            param_space: {x: 1}
            failure_config: {max_failures: 1}
        """ % PY)
        self.tune("run", "exp.yaml", check=0)
        t = self.trials("crash")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(t["failures"], 1)
        self.assertEqual(t["attempt"], 2)
        self.assertEqual(self.iterations("crash", t), list(range(1, 11)))
        rows = self.results("crash", t)
        self.assertEqual(rows[5]["restored_from"], 5)
        self.assertEqual(rows[5]["iterations_since_restore"], 1)
        self.assertGreaterEqual(rows[5]["time_total_s"], rows[4]["time_total_s"])

    def test_resume_never_refuses_an_existing_experiment_and_changes_nothing(self):
        self.write("exp.yaml", """
            name: again
            trial: {command: ["true"]}
            param_space: {x: 1}
        """)
        self.tune("run", "exp.yaml", check=0)
        exp = self.exp_dir("again")
        before = {f: os.stat(os.path.join(exp, f)).st_mtime_ns for f in os.listdir(exp)}
        p = self.tune("run", "exp.yaml", check=2)
        self.assertIn("--resume=auto", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1)
        after = {f: os.stat(os.path.join(exp, f)).st_mtime_ns for f in os.listdir(exp)}
        self.assertEqual(before, after)
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.assertEqual(self.tune("run", "exp.yaml", "--resume=must", "--name", "other").returncode, 2)

    def test_many_quick_trials_with_concurrency(self):
        self.write("exp.yaml", """
            name: many
            trial: {command: ["sh", "-c", "echo '{{\\"v\\": {i}}}'"]}
            param_space: {i: {grid_search: [%s]}}
            max_concurrent_trials: 4
            hosts: [{local: {cpus: 4}}]
        """ % ", ".join(str(i) for i in range(40)))
        self.tune("run", "exp.yaml", "--quiet", check=0)
        trials = self.trials("many")
        self.assertEqual(len(trials), 40)
        self.assertEqual({t["last_result"]["v"] for t in trials}, set(range(40)))


if __name__ == "__main__":
    unittest.main()


class ResumeSpecTest(TuneTest):
    def test_resume_refuses_a_changed_search_space_but_takes_a_new_stop_rule(self):
        self.write("exp.yaml", """
            name: changed
            trial: {command: ["true"]}
            param_space: {x: {grid_search: [1, 2]}}
            stop: {training_iteration: 3}
        """)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        state_before = open(os.path.join(self.exp_dir("changed"), "experiment_state.json")).read()
        p = self.tune("run", "exp.yaml", "--resume=auto", "--set", "trial.command=[false]", check=2)
        self.assertIn("different 'trial'", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1)
        self.assertEqual(open(os.path.join(self.exp_dir("changed"), "experiment_state.json")).read(), state_before)
        self.tune("run", "exp.yaml", "--resume=auto", "--set", "stop={training_iteration: 9}", "--quiet", check=0)
        with open(os.path.join(self.exp_dir("changed"), "tune.log")) as f:
            self.assertIn("resuming with a changed 'stop'", f.read())
