"""The Python helper module (lib/helpers/python/tune_trial.py), used as trials use it."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from harness import SOURCE

HELPERS = os.path.join(SOURCE, "lib", "helpers", "python")
sys.path.insert(0, HELPERS)
import tune_trial  # noqa: E402


def run_py(code, env, stdin="", cwd=None, drop=()):
    full = dict(os.environ, PYTHONPATH=HELPERS, **env)
    for k in drop:
        full.pop(k, None)
    return subprocess.run([sys.executable, "-c", code], env=full, input=stdin, capture_output=True, text=True,
                          timeout=60, cwd=cwd)


class PythonHelperTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tune-helper-")
        self.trial = os.path.join(self.tmp, "trial")
        os.makedirs(self.trial)
        self.env = {"TUNE_TRIAL_DIR": self.trial, "TUNE_CONFIG": json.dumps({"lr": 0.1, "opt": {"m": 0.9}})}

    def tearDown(self):
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_config_and_report(self):
        p = run_py("import tune_trial as t; c = t.config(); t.report({'lr': c['lr'], 'm': c['opt']['m'], "
                   "'nan': float('nan'), 'inf': float('inf'), 'ninf': [float('-inf')]})", self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        # NaN and infinities as json.dumps writes them, which tune reads (not null).
        self.assertEqual(p.stdout, '{"lr": 0.1, "m": 0.9, "nan": NaN, "inf": Infinity, "ninf": [-Infinity]}\n')

    def test_outside_tune_nothing_is_staged_in_the_cwd(self):
        cwd = os.path.join(self.tmp, "cwd")
        os.makedirs(cwd)
        code = """
import os, tempfile, tune_trial
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "w.bin"), "w").write("weights")
    tune_trial.report({"loss": 1}, checkpoint_dir=d)
    print(d)
"""
        p = run_py(code, {}, cwd=cwd, drop=("TUNE_TRIAL_DIR", "TUNE_CHECKPOINT_STAGING"))
        self.assertEqual(p.returncode, 0, p.stderr)
        line, given = p.stdout.splitlines()
        self.assertEqual(json.loads(line)["checkpoint"], given)
        self.assertEqual(os.listdir(cwd), [])

    def test_a_copy_cut_short_by_a_kill_is_removed_at_the_next_start(self):
        import signal
        import time
        # The checkpoint holds a FIFO: copying it blocks, so the helper is caught mid-copy.
        src = os.path.join(self.tmp, "ck")
        os.makedirs(src)
        with open(os.path.join(src, "a.bin"), "w") as f:
            f.write("a")
        os.mkfifo(os.path.join(src, "z.fifo"))
        code = "import tune_trial; tune_trial.report({}, checkpoint_dir=%r)" % src
        p = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=HELPERS, **self.env))
        partial = lambda: [x for x in os.listdir(self.trial) if x.endswith(".partial")]
        deadline = time.time() + 30
        while not (partial() and os.path.exists(os.path.join(self.trial, partial()[0], "a.bin"))):
            self.assertLess(time.time(), deadline, "the helper never started copying")
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        p.wait()
        # Left for a process that still runs (this one) and complete staged dirs: kept.
        mine = ".staged_checkpoint_%d_1.partial" % os.getpid()
        os.makedirs(os.path.join(self.trial, mine))
        os.makedirs(os.path.join(self.trial, ".staged_checkpoint_%d_1" % p.pid))
        q = run_py("import tune_trial", self.env)
        self.assertEqual(q.returncode, 0, q.stderr)
        self.assertEqual(partial(), [mine])
        self.assertTrue(os.path.isdir(os.path.join(self.trial, ".staged_checkpoint_%d_1" % p.pid)))

    def test_copies_go_to_the_staging_dir_when_there_is_one(self):
        staging = os.path.join(self.trial, ".staging")
        code = """
import os, tempfile, tune_trial
with tempfile.TemporaryDirectory() as d:
    tune_trial.report({"loss": 1}, checkpoint_dir=d)
"""
        p = run_py(code, dict(self.env, TUNE_CHECKPOINT_STAGING=staging))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(os.path.dirname(json.loads(p.stdout)["checkpoint"]), staging)

    def test_temporary_directory_checkpoint_is_copied_in_before_report_returns(self):
        code = """
import os, tempfile, tune_trial
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "w.bin"), "w").write("weights")
    os.symlink("w.bin", os.path.join(d, "link"))
    tune_trial.report({"loss": 1}, checkpoint_dir=d)
"""
        p = run_py(code, self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        staged = json.loads(p.stdout)["checkpoint"]
        self.assertTrue(staged.startswith(self.trial + os.sep))
        with open(os.path.join(staged, "w.bin")) as f:
            self.assertEqual(f.read(), "weights")
        self.assertTrue(os.path.islink(os.path.join(staged, "link")))
        self.assertFalse([x for x in os.listdir(self.trial) if x.endswith(".partial")])

    def test_checkpoint_inside_the_trial_dir_is_handed_over_as_is(self):
        inside = os.path.join(self.trial, "mine")
        os.makedirs(inside)
        p = run_py("import tune_trial; tune_trial.report({}, checkpoint_dir=%r)" % inside, self.env)
        self.assertEqual(json.loads(p.stdout)["checkpoint"], inside)

    def test_get_checkpoint(self):
        self.assertIsNone(run_py("import tune_trial; print(tune_trial.get_checkpoint())", self.env).stdout.strip()
                          if False else None)
        p = run_py("import tune_trial; print(tune_trial.get_checkpoint())", dict(self.env, TUNE_RESTORE_CHECKPOINT="/x"))
        self.assertEqual(p.stdout.strip(), "/x")
        p = run_py("import tune_trial; print(tune_trial.get_checkpoint())", self.env)
        self.assertEqual(p.stdout.strip(), "None")

    def test_trainable_protocol(self):
        code = """
import os, tune_trial
class T(tune_trial.Trainable):
    def setup(self, config):
        self.n = 0
        self.lr = config["lr"]
    def step(self):
        self.n += 1
        print("user print", self.n)
        return {"n": self.n, "lr": self.lr}
    def save_checkpoint(self, d):
        open(os.path.join(d, "n"), "w").write(str(self.n))
    def load_checkpoint(self, d):
        self.n = int(open(os.path.join(d, "n")).read())
    def reset_config(self, c):
        self.lr = c["lr"]
        return True
raise SystemExit(tune_trial.run_trainable(T))
"""
        ck = os.path.join(self.tmp, "ck")
        cmds = [{"op": "step"}, {"op": "step"}, {"op": "save", "path": ck}, {"op": "step"},
                {"op": "restore", "path": ck}, {"op": "reset", "config": {"lr": 0.5}}, {"op": "step"}, {"op": "stop"},
                {"op": "step"}]
        p = run_py(code, self.env, "\n".join(json.dumps(c) for c in cmds) + "\nnot json\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        replies = [json.loads(x) for x in p.stdout.splitlines()]
        self.assertEqual(replies, [{"n": 1, "lr": 0.1}, {"n": 2, "lr": 0.1}, {"saved": ck}, {"n": 3, "lr": 0.1},
                                   {"restored": ck}, {"reset": True}, {"n": 3, "lr": 0.5}])
        self.assertIn("user print 1", p.stderr)


if __name__ == "__main__":
    unittest.main()
