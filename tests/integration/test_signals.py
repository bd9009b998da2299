"""Ctrl-C once and twice, the one-driver lock, and orphaned trials stopping themselves."""
import json
import os
import signal
import time
import unittest

from harness import PY, TuneTest

FOREVER = """
import os, signal, sys, tempfile, time, tune_trial
if len(sys.argv) > 1 and sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
start = 0
ck = tune_trial.get_checkpoint()
if ck:
    start = int(open(os.path.join(ck, "i")).read())
i = start
while True:
    i += 1
    d = None
    if i % 2 == 0:
        d = tempfile.mkdtemp()
        open(os.path.join(d, "i"), "w").write(str(i))
    tune_trial.report({"i": i}, checkpoint_dir=d)
    time.sleep(0.1)
"""


class SignalTest(TuneTest):
    def setUp(self):
        super().setUp()
        self.write("forever.py", FOREVER)

    def exp(self, name, extra="", arg="normal"):
        self.write("exp.yaml", """
            name: %s
            trial: {command: ["%s", "forever.py", "%s"]}
            param_space: {x: {grid_search: [1, 2]}}
            %s
        """ % (name, PY, arg, extra))

    def wait_running(self, name, iterations=3):
        def ready():
            ts = self.trials(name)
            return len(ts) == 2 and all(t["status"] == "RUNNING" for t in ts) and all(
                len(self.results(name, t)) >= iterations for t in ts)
        self.wait_for(ready, what="trials running")

    def test_ctrl_c_once_saves_state_and_resume_finishes(self):
        self.exp("ctrlc")
        p = self.start_tune("run", "exp.yaml")
        self.wait_running("ctrlc")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("--resume=auto", out)
        st = self.state("ctrlc")
        self.assertEqual(st["phase"], "interrupted")
        self.assertEqual({t["status"] for t in st["trials"]}, {"PENDING"})
        self.assertEqual(self.processes_under(self.dir), [])
        # resume with a stop rule past what ran (on a loaded machine the trials may have run
        # further before Ctrl-C took effect): restarts from the latest checkpoint, each
        # iteration once
        stop = max(max(self.iterations("ctrlc", t)) for t in st["trials"]) + 6
        self.tune("run", "exp.yaml", "--resume=auto", "--set", "stop={training_iteration: %d}" % stop,
                  "--quiet", check=0)
        for t in self.trials("ctrlc"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(t["attempt"], 2)
            self.assertEqual(self.iterations("ctrlc", t), list(range(1, stop + 1)))
            self.assertEqual([r["i"] for r in self.results("ctrlc", t)], list(range(1, stop + 1)))

    def test_an_interrupted_experiment_resumes_after_being_moved(self):
        import shutil
        self.exp("moved")
        p = self.start_tune("run", "exp.yaml")
        self.wait_running("moved")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130)
        new_storage = os.path.join(self.dir, "elsewhere")
        os.makedirs(new_storage)
        shutil.move(self.exp_dir("moved"), os.path.join(new_storage, "moved"))
        self.tune("run", "exp.yaml", "--resume=must", "--storage-path", new_storage,
                  "--set", "stop={training_iteration: 10}", "--quiet", check=0)
        self.storage = new_storage
        for t in self.trials("moved"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(self.iterations("moved", t), list(range(1, 11)))
            d = os.path.join(new_storage, "moved", t["trial_name"])
            for c in t["checkpoints"]:
                self.assertTrue(os.path.isdir(os.path.join(d, c["dir"])))

    def test_ctrl_c_twice_stops_at_once(self):
        self.exp("twice", arg="stubborn")
        env = dict(self.env, TUNE_STOP_GRACE_S="60")
        p = self.start_tune("run", "exp.yaml", env=env)
        self.wait_running("twice")
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        self.assertIsNone(p.poll(), "one Ctrl-C waits for the trials' grace period")
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130)
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(self.state("twice")["phase"], "interrupted")

    def test_second_driver_is_refused_naming_the_first(self):
        self.exp("locked")
        p = self.start_tune("run", "exp.yaml")
        self.wait_running("locked", 1)
        q = self.tune("run", "exp.yaml", "--resume=auto", check=2)
        self.assertIn("already being run by pid %d" % p.pid, q.stderr)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130)

    def test_trials_outlive_a_killed_driver_then_stop_as_orphans(self):
        self.exp("orphan", extra="orphan_timeout_s: 3")
        p = self.start_tune("run", "exp.yaml")
        self.wait_running("orphan", 2)
        p.kill()
        p.communicate()
        names = [t["trial_name"] for t in self.trials("orphan")]
        trial_dirs = [os.path.join(self.exp_dir("orphan"), n) for n in names]
        def lines(d):
            with open(os.path.join(d, "stdout.log")) as f:
                return len(f.read().splitlines())
        n_before = [lines(d) for d in trial_dirs]
        time.sleep(1.0)
        n_after = [lines(d) for d in trial_dirs]
        self.assertTrue(all(a > b for a, b in zip(n_after, n_before)), "trials keep running without a driver")
        for n in names:
            self.wait_for(lambda: self.exit_record("orphan", n) is not None, timeout=20,
                          what="orphan stop")
            self.assertEqual(self.exit_record("orphan", n)["reason"], "orphaned")


if __name__ == "__main__":
    unittest.main()
