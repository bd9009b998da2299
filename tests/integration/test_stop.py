"""`tune stop`: through the running driver, or the detached trials of a dead driver; the
experiment resumes afterwards."""
import json
import os
import shutil
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


# Step mode: trial x=1 waits in its step 3 for the flag file, then says done at step 5; trial x=2
# steps every 0.1 s until something stops it. Each step's count is checkpointed on request.
STEPPER = """
import os, sys, time, tune_trial
class T(tune_trial.Trainable):
    def setup(self, config):
        self.x, self.i = config["x"], 0
    def step(self):
        self.i += 1
        if self.x == 1:
            while self.i == 3 and not os.path.exists(sys.argv[1]):
                time.sleep(0.05)
        else:
            time.sleep(0.1)
        return {"i": self.i, "done": self.x == 1 and self.i == 5}
    def save_checkpoint(self, d):
        open(os.path.join(d, "i"), "w").write(str(self.i))
    def load_checkpoint(self, d):
        self.i = int(open(os.path.join(d, "i")).read())
raise SystemExit(tune_trial.run_trainable(T))
"""

class StopStepAndPausedTest(TuneTest):
    """`tune stop --trial` on a step-mode trial and on a PAUSED one: TERMINATED (reason stopped,
    cause user) while the others run on, and a resume keeps it as it is."""

    def setUp(self):
        super().setUp()
        self.flag = os.path.join(self.dir, "flag")

    def check_stopped_by_user(self, name, tid):
        t = {t["trial_id"]: t for t in self.trials(name)}[tid]
        self.assertEqual((t["status"], t["reason"], t["cause"]), ("TERMINATED", "stopped", "user"))
        return t

    def test_stop_a_step_mode_trial(self):
        self.write("stepper.py", STEPPER)
        self.write("exp.yaml", """
            trial: {command: ["%s", "stepper.py", "%s"], mode: step}
            param_space: {x: {grid_search: [1, 2]}}
            checkpoint_config: {checkpoint_at_end: true}
            hosts: [{local: {cpus: 2}}]
        """ % (PY, self.flag))
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        def ready():
            by_id = {t["trial_id"]: t for t in self.trials("exp")}
            return (len(by_id) == 2 and by_id["00000"]["iteration"] == 2
                    and by_id["00001"]["iteration"] >= 3)
        self.wait_for(ready, what="trial 00000 waiting in step 3, trial 00001 past step 3")
        p = self.tune("stop", "exp", "--trial", "00001", check=0)
        self.assertIn("stopped trial trial_00001_x=2 (TERMINATED)", p.stdout)
        self.assertIsNone(proc.poll())  # the driver runs on, and so does trial 00000
        t1 = self.check_stopped_by_user("exp", "00001")
        # Saved before it stopped (checkpoint_at_end): its last checkpoint is its last step.
        last = t1["iteration"]
        self.assertEqual(self.iterations("exp", t1), list(range(1, last + 1)))
        self.assertEqual(t1["checkpoints"][-1]["iteration"], last)
        with open(os.path.join(self.exp_dir("exp"), t1["trial_name"], t1["checkpoints"][-1]["dir"],
                               "i")) as f:
            self.assertEqual(int(f.read()), last)
        self.assertEqual({t["trial_id"]: t["status"] for t in self.trials("exp")}["00000"],
                         "RUNNING")
        open(self.flag, "w").close()
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        t0 = {t["trial_id"]: t for t in self.trials("exp")}["00000"]
        self.assertEqual((t0["status"], t0["iteration"]), ("TERMINATED", 5))
        # Resumed: trial 00001 stays as it is (no new attempt, no new result).
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        again = self.check_stopped_by_user("exp", "00001")
        self.assertEqual((again["iteration"], again["attempt"]), (last, t1["attempt"]))
        self.assertEqual(self.iterations("exp", again), list(range(1, last + 1)))

    def start_hyperband(self):
        """Three trials in one hyperband bracket (max_t 3, reduction_factor 3: the rung at
        iteration 1); score = x * i with a checkpoint per iteration. Trial x=3 waits for the
        flag before its first result, so trials 00000 and 00001 stay PAUSED at the rung."""
        self.write("rung.py", """
            import json, os, sys, tempfile, time, tune_trial
            x = json.loads(os.environ["TUNE_CONFIG"])["x"]
            ck = tune_trial.get_checkpoint()
            start = int(open(os.path.join(ck, "i")).read()) if ck else 0
            for i in range(start + 1, 4):
                while x == 3 and not os.path.exists(sys.argv[1]):
                    time.sleep(0.05)
                with tempfile.TemporaryDirectory() as d:
                    open(os.path.join(d, "i"), "w").write(str(i))
                    tune_trial.report({"score": x * i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", """
            trial: {command: ["%s", "rung.py", "%s"]}
            param_space: {x: {grid_search: [1, 2, 3]}}
            metric: score
            mode: max
            scheduler: {type: hyperband, max_t: 3, reduction_factor: 3}
            hosts: [{local: {cpus: 3}}]
        """ % (PY, self.flag))
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        def paused():
            by_id = {t["trial_id"]: t["status"] for t in self.trials("exp")}
            return by_id.get("00000") == "PAUSED" and by_id.get("00001") == "PAUSED"
        self.wait_for(paused, what="trials 00000 and 00001 PAUSED at the rung")
        return proc

    def check_rung_without_00000(self):
        """Trial 00002 completed the rung without trial 00000 (it left the bracket): of the two
        left, the better (00002) went on to max_t and hyperband stopped 00001; 00000 stays as
        the user left it, through a resume too."""
        for resumed in (False, True):
            by_id = {t["trial_id"]: t for t in self.trials("exp")}
            self.assertEqual({k: t["status"] for k, t in by_id.items()},
                             {"00000": "TERMINATED", "00001": "TERMINATED", "00002": "TERMINATED"})
            self.assertEqual(self.iterations("exp", by_id["00002"]), [1, 2, 3])
            self.assertEqual(self.iterations("exp", by_id["00001"]), [1])
            self.assertEqual((by_id["00001"]["reason"], by_id["00001"]["cause"]),
                             ("stopped", "cutoff"))
            t0 = self.check_stopped_by_user("exp", "00000")
            self.assertEqual((t0["attempt"], self.iterations("exp", t0)), (1, [1]))
            if not resumed:
                self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        self.assertEqual(os.listdir(os.path.join(self.exp_dir("exp"), ".tune", "stop_requests")),
                         [])

    def test_stop_a_paused_trial(self):
        proc = self.start_hyperband()
        p = self.tune("stop", "exp", "--trial", "00000", check=0)
        self.assertIn("stopped trial trial_00000_x=1 (TERMINATED)", p.stdout)
        self.assertIsNone(proc.poll())
        self.check_stopped_by_user("exp", "00000")
        self.assertEqual({t["trial_id"]: t["status"] for t in self.trials("exp")}["00001"],
                         "PAUSED")
        open(self.flag, "w").close()
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        self.check_rung_without_00000()

    def test_stop_a_paused_trial_while_no_driver_runs(self):
        proc = self.start_hyperband()
        proc.send_signal(signal.SIGKILL)  # trial 00002 goes on detached; the paused ones are idle
        proc.communicate(timeout=30)
        p = self.tune("stop", "exp", "--trial", "00000", check=0)
        self.assertIn("trial 00000 does not run: it is TERMINATED when the experiment resumes",
                      p.stdout)
        self.assertEqual({t["trial_id"]: t["status"] for t in self.trials("exp")}["00000"],
                         "PAUSED")  # until the resume
        open(self.flag, "w").close()
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        self.check_rung_without_00000()


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
        # A copy that this run refuses (its param_space differs) is not left behind: the
        # corrected command makes it again.
        p = self.tune("run", "exp.yaml", "--restore-from", self.exp_dir("exp"), "--name", "copy",
                      "--set", "param_space.x.grid_search=[1, 3]", check=2)
        self.assertIn("different 'param_space'", p.stderr)
        self.assertFalse(os.path.exists(self.exp_dir("copy")))
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

    def test_a_pending_stop_request_and_callback_output_stay_with_the_source(self):
        """`tune stop --trial` while no driver runs leaves a request for the source's next run;
        a copy made with --restore-from (a directory, or a mirror that holds one) does not
        inherit it, nor the source's callback output."""
        self.write("exp.yaml", """
            trial: {command: ["%s", "count.py", "%s"]}
            param_space: {x: {grid_search: [1, 2]}}
            callbacks: [{on: [trial_start], command: ["cat"]}]
        """ % (PY, self.flag))
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        self.wait_waiting()
        self.tune("stop", "exp", check=0)
        proc.communicate(timeout=60)
        p = self.tune("stop", "exp", "--trial", "00001", check=0)
        self.assertIn("TERMINATED when the experiment resumes", p.stdout)
        src = self.exp_dir("exp")
        requests = os.path.join(src, ".tune", "stop_requests")
        callbacks = os.path.join(src, ".tune", "callbacks")
        self.assertEqual(os.listdir(requests), ["00001"])
        self.assertTrue(os.listdir(callbacks))  # the callback's output of the first run
        with open(os.path.join(callbacks, "older.stdout"), "w") as f:  # one the copy won't remake
            f.write("from the source\n")
        # A mirror an older tune made could hold both: planted there, as the copy would be.
        mirror = os.path.join(self.dir, "mirror", "exp")
        shutil.copytree(src, mirror)
        open(self.flag, "w").close()
        for name, source in (("copy", src), ("back", "file://" + mirror)):
            self.tune("run", "exp.yaml", "--restore-from", source, "--name", name, "--quiet",
                      check=0)
            for t in self.trials(name):  # trial 00001 too: the request was for the source
                self.assertEqual(t["status"], "TERMINATED")
                self.assertNotEqual(t.get("cause"), "user")
                self.assertEqual([r["i"] for r in self.results(name, t)], [1, 2, 3, 4, 5])
            copied = os.path.join(self.exp_dir(name), ".tune")
            self.assertFalse(os.path.exists(os.path.join(copied, "stop_requests", "00001")))
            self.assertFalse(os.path.exists(os.path.join(copied, "callbacks", "older.stdout")))
            self.assertTrue(os.listdir(os.path.join(copied, "callbacks")))  # its own output
        # The source keeps its request: its own resume stops trial 00001 as asked.
        self.assertEqual(os.listdir(requests), ["00001"])
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        by_id = {t["trial_id"]: t for t in self.trials("exp")}
        self.assertEqual((by_id["00001"]["status"], by_id["00001"]["cause"]), ("TERMINATED", "user"))
        self.assertEqual([r["i"] for r in self.results("exp", by_id["00001"])], [1, 2])

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
