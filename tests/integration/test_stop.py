"""`tune stop`: through the running driver, or the detached trials of a dead driver; the
experiment resumes afterwards."""
import json
import os
import signal
import time
import unittest

from harness import PY, TuneTest

# Counts with a checkpoint per step; waits at step 3 until the flag file exists.
COUNT = """
import os, sys, tempfile, time, tune_trial
ck = tune_trial.get_checkpoint()
start = int(open(os.path.join(ck, "i")).read()) if ck else 0
for i in range(start + 1, 6):
    while i == 3 and not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "i"), "w").write(str(i))
        tune_trial.report({"i": i, "start": start}, checkpoint_dir=d)
"""


class WaitingTrials(TuneTest):
    """Two trials that checkpoint each step and wait at step 3 for a flag file."""

    def setUp(self):
        super().setUp()
        self.flag = os.path.join(self.dir, "flag")
        self.write("count.py", COUNT)
        self.write("exp.yaml", """
            trial: {command: ["%s", "count.py", "%s"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % (PY, self.flag))

    def wait_waiting(self):
        """Until both trials reported 2 results (they wait for the flag then)."""
        def ready():
            ts = self.trials("exp")
            return len(ts) == 2 and all(t["iteration"] == 2 for t in ts)
        self.wait_for(ready, what="both trials at iteration 2")

    def resume_and_check(self):
        open(self.flag, "w").close()
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        for t in self.trials("exp"):
            self.assertEqual(t["status"], "TERMINATED")
            rows = self.results("exp", t)
            self.assertEqual([r["i"] for r in rows], [1, 2, 3, 4, 5])
            self.assertEqual(rows[-1]["start"], 2)  # continued from its checkpoint


class StopTest(WaitingTrials):
    def test_stop_through_the_driver(self):
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        self.wait_waiting()
        p = self.tune("stop", "exp", check=0)
        self.assertIn("resume with: tune run", p.stdout)
        proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130)  # as after Ctrl-C
        for t in self.trials("exp"):
            self.assertEqual((t["status"], t.get("reason")), ("PENDING", "interrupted"))
        self.assertEqual(self.processes_under(self.dir), [])
        self.resume_and_check()

    def test_stop_the_detached_trials_of_a_dead_driver(self):
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        self.wait_waiting()
        proc.send_signal(signal.SIGKILL)  # the driver dies; its trials go on detached
        proc.communicate(timeout=30)
        time.sleep(0.3)
        self.assertNotEqual(self.processes_under(self.dir), [])
        # One trial first, by id: the other keeps running.
        p = self.tune("stop", "exp", "--trial", "00001", check=0)
        self.assertIn("trial_00001", p.stderr)
        self.assertNotIn("trial_00000", p.stderr)
        self.assertTrue(any("count.py" in open("/proc/%d/cmdline" % pid).read()
                            for pid in self.processes_under(self.dir)))
        self.tune("stop", "exp", check=0)
        self.wait_for(lambda: self.processes_under(self.dir) == [], timeout=10, what="no process")
        self.assertIn("nothing of 'exp' runs", self.tune("stop", "exp", check=0).stdout)
        # The trial stopped on its own stays stopped (TERMINATED); the other continues.
        open(self.flag, "w").close()
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        by_id = {t["trial_id"]: t for t in self.trials("exp")}
        self.assertEqual((by_id["00001"]["status"], by_id["00001"]["cause"]), ("TERMINATED", "user"))
        self.assertEqual([r["i"] for r in self.results("exp", by_id["00001"])], [1, 2])
        self.assertEqual(by_id["00001"]["attempt"], 1)
        self.assertEqual(by_id["00000"]["status"], "TERMINATED")
        self.assertEqual([r["i"] for r in self.results("exp", by_id["00000"])], [1, 2, 3, 4, 5])

    def test_an_unknown_trial_is_an_error(self):
        open(self.flag, "w").close()
        self.tune("run", "exp.yaml", "--quiet", check=0)
        p = self.tune("stop", "exp", "--trial", "nope", check=2)
        self.assertIn("no trial 'nope'", p.stderr)


class StopOneTrialTest(WaitingTrials):
    """`tune stop --trial` while the driver runs: that trial ends TERMINATED, the others go on,
    and a resume keeps it as it is."""

    def setUp(self):
        super().setUp()
        self.write("exp.yaml", """
            trial: {command: ["%s", "count.py", "%s"]}
            param_space: {x: {grid_search: [1, 2, 3]}}
            hosts: [{local: {cpus: 3}}]
        """ % (PY, self.flag))

    def test_stop_one_trial_through_the_running_driver(self):
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        def ready():
            ts = self.trials("exp")
            return len(ts) == 3 and all(t["iteration"] == 2 for t in ts)
        self.wait_for(ready, what="three trials at iteration 2")
        p = self.tune("stop", "exp", "--trial", "trial_00001_x=2", check=0)
        self.assertIn("stopped trial trial_00001_x=2 (TERMINATED)", p.stdout)
        self.assertIsNone(proc.poll())  # the driver runs on
        by_id = {t["trial_id"]: t for t in self.trials("exp")}
        self.assertEqual((by_id["00001"]["status"], by_id["00001"]["reason"],
                          by_id["00001"]["cause"]), ("TERMINATED", "stopped", "user"))
        self.assertEqual(by_id["00000"]["status"], "RUNNING")
        self.assertEqual(by_id["00002"]["status"], "RUNNING")
        self.assertEqual(self.tune("stop", "exp", "--trial", "00001", check=0).stdout,
                         "trial trial_00001_x=2 has ended already (TERMINATED)\n")
        open(self.flag, "w").close()
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        def check():
            by_id = {t["trial_id"]: t for t in self.trials("exp")}
            for tid, rows in (("00000", [1, 2, 3, 4, 5]), ("00001", [1, 2]),
                              ("00002", [1, 2, 3, 4, 5])):
                self.assertEqual(by_id[tid]["status"], "TERMINATED")
                self.assertEqual([r["i"] for r in self.results("exp", by_id[tid])], rows)
                self.assertEqual(by_id[tid]["attempt"], 1)
        check()
        with open(os.path.join(self.exp_dir("exp"), "tune.log")) as f:
            self.assertIn("stopping it (tune stop --trial); the others run on", f.read())
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        check()  # kept as it is: not restarted
        self.assertEqual(os.listdir(os.path.join(self.exp_dir("exp"), ".tune", "stop_requests")),
                         [])


class RestoreFromTest(WaitingTrials):
    """`tune run --restore-from DIR|URI --name NEW`."""

    def test_a_stopped_experiment_continues_under_a_new_name(self):
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        self.wait_waiting()
        # Refused while its driver runs, and nothing is left behind.
        p = self.tune("run", "exp.yaml", "--restore-from", self.exp_dir("exp"), "--name", "copy",
                      check=2)
        self.assertIn("is being run by pid %d" % proc.pid, p.stderr)
        self.assertFalse(os.path.exists(self.exp_dir("copy")))
        self.tune("stop", "exp", check=0)
        proc.communicate(timeout=60)
        open(self.flag, "w").close()
        p = self.tune("run", "exp.yaml", "--restore-from", self.exp_dir("exp"), "--name", "copy",
                      "--quiet", check=0)
        for t in self.trials("copy"):
            self.assertEqual(t["status"], "TERMINATED")
            rows = self.results("copy", t)
            self.assertEqual([r["i"] for r in rows], [1, 2, 3, 4, 5])
            self.assertEqual(rows[-1]["start"], 2)  # from the copied checkpoint
        # The source is untouched: still interrupted, its trials still PENDING.
        self.assertEqual(self.state("exp")["phase"], "interrupted")
        self.assertEqual({t["status"] for t in self.trials("exp")}, {"PENDING"})
        # A name that already holds an experiment is refused.
        p = self.tune("run", "exp.yaml", "--restore-from", self.exp_dir("exp"), "--name", "copy",
                      check=2)
        self.assertIn("already holds an experiment", p.stderr)

    def test_from_a_file_mirror(self):
        open(self.flag, "w").close()
        mirror = os.path.join(self.dir, "mirror")
        self.tune("run", "exp.yaml", "--set", "sync_config.upload_dir=file://" + mirror, "--quiet",
                  check=0)
        uri = "file://" + os.path.join(mirror, "exp")
        self.tune("run", "exp.yaml", "--restore-from", uri, "--name", "back",
                  "--set", "sync_config.upload_dir=file://" + mirror, "--quiet", check=0)
        self.assertEqual(len(self.trials("back")), 2)
        self.assertEqual({t["status"] for t in self.trials("back")}, {"TERMINATED"})
        p = self.tune("run", "exp.yaml", "--restore-from", "file:///nonexistent/x", "--name", "none",
                      check=2)
        self.assertFalse(os.path.exists(self.exp_dir("none")))


if __name__ == "__main__":
    unittest.main()
