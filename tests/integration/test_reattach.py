"""A driver killed with SIGKILL while its trials run: the next `--resume=auto`
re-attaches to the trials still running (same process, same attempt) and finishes the ones that
ended meanwhile from their output and exit status; no result is lost or recorded twice."""
import json
import os
import re
import signal
import time
import unittest

from harness import PY, SOURCE, TuneTest

TRIAL = os.path.join(SOURCE, "tests", "fixtures", "chaos_trial.py")


class ReattachTest(TuneTest):
    def setUp(self):
        super().setUp()
        self.write("exp.yaml", f"""
            name: re
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{grid_search: [0.5, 1.5]}}
              steps: 30
              sleep: 0.05
            checkpoint_config: {{num_to_keep: 2}}
            """)

    def kill_driver_while_running(self):
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("re")) == 2 and all(
            os.path.exists(os.path.join(self.exp_dir("re"), t["trial_name"], "result.json"))
            for t in self.trials("re")), what="both trials reporting")
        p.kill()
        p.communicate()

    def check_finished_once(self):
        for t in self.trials("re"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(t["attempt"], 1, "the trial was restarted, not re-attached")
            rows = self.results("re", t)
            self.assertEqual([r["training_iteration"] for r in rows], list(range(1, 31)))
            self.assertEqual([r["step"] for r in rows], list(range(1, 31)))
            self.assertEqual(len({r["pid"] for r in rows}), 1, "one process did all the work")
            self.assertIsNotNone(rows[-1]["pid"])
            # Checkpoints every 3 iterations, the 2 latest kept: 27 and 30, on disk.
            self.assertEqual([c["iteration"] for c in t["checkpoints"]], [27, 30])
            for c in t["checkpoints"]:
                self.assertTrue(os.path.isfile(os.path.join(
                    self.exp_dir("re"), t["trial_name"], c["dir"], "state.json")))

    def tune_log(self):
        with open(os.path.join(self.exp_dir("re"), "tune.log")) as f:
            return f.read()

    def test_running_trials_are_reattached(self):
        self.kill_driver_while_running()
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.assertEqual(self.tune_log().count("re-attached (running)"), 2)
        self.check_finished_once()

    def test_trials_that_ended_meanwhile_are_finished_from_their_files(self):
        self.kill_driver_while_running()
        for t in self.trials("re"):
            self.wait_for(lambda: self.exit_record("re", t["trial_name"]) is not None,
                          what="trial end")
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.assertEqual(self.tune_log().count("re-attached (ended meanwhile)"), 2)
        self.check_finished_once()


    def test_a_stdout_log_removed_while_no_driver_ran_is_named(self):
        # Its output read before is kept (the results in result.json); what the trial writes
        # into the removed file is lost, and the resumed driver says so instead of nothing.
        self.kill_driver_while_running()
        t = self.trials("re")[0]
        os.unlink(os.path.join(self.exp_dir("re"), t["trial_name"], "stdout.log"))
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.assertRegex(self.tune_log(), r"trial %s: its stdout.log was removed while no driver "
                         r"ran, after \d+ bytes read: what the trial prints from now on is lost"
                         % t["trial_name"])
        for u in self.trials("re"):
            self.assertEqual(u["status"], "TERMINATED")
            got = [r["training_iteration"] for r in self.results("re", u)]
            if u["trial_id"] == t["trial_id"]:  # what was read before the kill, and no more
                self.assertEqual(got, list(range(1, len(got) + 1)))
                self.assertLess(len(got), 30)
            else:
                self.assertEqual(got, list(range(1, 31)))

    def test_an_attempt_log_cut_short_does_not_start_a_second_attempt(self):
        # The log lost the lines that name the running supervisors while no driver ran. Each
        # supervisor holds its trial dir's lock, which names it: the resume re-attaches to it
        # instead of starting attempt 2 beside the live attempt 1.
        with open(os.path.join(self.dir, "exp.yaml")) as f:
            text = f.read().replace("sleep: 0.05", "sleep: 0.2")  # 6 s: still running at resume
        self.write("exp.yaml", text)
        self.kill_driver_while_running()
        os.truncate(os.path.join(self.exp_dir("re"), ".tune", "attempts.log"), 0)
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.assertEqual(len(re.findall(
            r"names no running supervisor for attempt 1, but one holds the trial dir "
            r"\(pid \d+\): re-attached to it", self.tune_log())), 2, self.tune_log())
        self.check_finished_once()

    def test_a_forged_log_line_naming_another_supervisor_is_not_believed(self):
        # Anyone of the user may append to the attempt log: a line giving trial B's attempt to
        # trial A's live supervisor (its true start time) must not make the resume attach B to
        # it (a later stop of B would stop A); B's own supervisor holds B's dir and is found.
        with open(os.path.join(self.dir, "exp.yaml")) as f:
            text = f.read().replace("sleep: 0.05", "sleep: 0.2")  # 6 s: still running at resume
        self.write("exp.yaml", text)
        self.kill_driver_while_running()
        log = os.path.join(self.exp_dir("re"), ".tune", "attempts.log")
        with open(log) as f:
            lines = [json.loads(l) for l in f if '"supervising"' in l]
        a, b = sorted(t["trial_name"] for t in self.trials("re"))
        line_a = [l for l in lines if l["trial"] == a][-1]
        with open(log, "a") as f:
            f.write(json.dumps(dict(line_a, trial=b), separators=(",", ":")) + "\n")
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.assertIn("names supervisor %d for attempt 1, but another process holds the trial "
                      "dir: not believed" % line_a["supervisor"], self.tune_log())
        self.check_finished_once()


class ArrivalTimesTest(TuneTest):
    """Results read after a re-attach get the trial's times (when each line arrived, as its
    supervisor noted it), not the resuming driver's: no 0 s iterations for the lines written
    while no driver ran, and the outage is not counted in one iteration."""

    def test_results_read_late_keep_their_times(self):
        self.write("exp.yaml", f"""
            name: times
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: 0.5, steps: 14, sleep: 0.3}}
            """)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("times")) == 1 and len(
            self.results("times", self.trials("times")[0])) >= 2, what="2 results")
        p.kill()
        p.communicate()
        time.sleep(3)  # ~10 results are written while no driver runs
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        t = self.trials("times")[0]
        self.assertEqual(t["attempt"], 1)
        rows = self.results("times", t)
        self.assertEqual([r["step"] for r in rows], list(range(1, 15)))
        self.check_arrival_times(rows, gap=0.3, outage=3)

class CheckpointInFlightTest(TuneTest):
    """A driver killed while a checkpoint it had read was still being copied in (on the file
    worker: the trial reported a dir in its workdir): the state it wrote names the checkpoint as
    being taken, and the resume takes it again, so it is not lost."""

    TRIAL = """
        import json, os, sys, time
        ck = os.environ.get("TUNE_RESTORE_CHECKPOINT")
        start = json.load(open(os.path.join(ck, "state.json")))["i"] if ck else 0
        for i in range(start + 1, 13):
            result = {"loss": 1.0 / i}
            if i == 2:  # in the workdir: copied in, the original left alone
                os.makedirs("ck", exist_ok=True)
                with open(os.path.join("ck", "state.json"), "w") as f:
                    json.dump({"i": i}, f)
                result["checkpoint"] = "ck"
            print(json.dumps(result), flush=True)
            if i == 4:  # the rest once the test has killed the driver
                while not os.path.exists(os.environ["GO_FILE"]):
                    time.sleep(0.05)
            time.sleep(0.05)
        """

    def setUp(self):
        super().setUp()
        self.write("trial.py", self.TRIAL)
        self.go = os.path.join(self.dir, "go")
        self.write("exp.yaml", f"""
            name: inflight
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'trial.py')}"]
              workdir: {self.dir}
              env: {{GO_FILE: "{self.go}"}}
            param_space: {{x: 1}}
            """)

    def kill_while_copying(self):
        env = dict(self.env, TUNE_TEST_ADOPT_DELAY_S="60", TUNE_GLOBAL_CHECKPOINT_S="0.1")
        p = self.start_tune("run", "exp.yaml", env=env)
        self.wait_for(lambda: len(self.trials("inflight")) == 1 and
                      self.trials("inflight")[0]["checkpoint_seq"] == 1 and
                      self.trials("inflight")[0]["iteration"] >= 4, what="the checkpoint counted")
        p.kill()
        p.communicate()
        t = self.trials("inflight")[0]
        self.assertEqual(t["checkpoints"], [], "the copy was done before the kill")
        self.assertEqual([a["seq"] for a in t.get("adopting", [])], [1])
        return t

    def check_kept(self):
        t = self.trials("inflight")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(t["attempt"], 1)
        self.assertNotIn("adopting", t)
        self.assertEqual([(c["dir"], c["iteration"]) for c in t["checkpoints"]],
                         [("checkpoint_000001", 2)])
        with open(os.path.join(self.exp_dir("inflight"), t["trial_name"], "checkpoint_000001",
                               "state.json")) as f:
            self.assertEqual(json.load(f), {"i": 2})
        rows = self.results("inflight", t)
        self.assertEqual([r["training_iteration"] for r in rows], list(range(1, 13)))
        self.assertEqual([r.get("checkpoint_dir_name") for r in rows][:3],
                         [None, "checkpoint_000001", None])
        with open(os.path.join(self.exp_dir("inflight"), "tune.log")) as f:
            log = f.read()
        self.assertIn("checkpoint_000001 was being taken when the driver stopped: taking it "
                      "again from ck", log)
        out = self.tune("checkpoints", "ls", "inflight", check=0)
        self.assertIn("checkpoint_000001", out.stdout)

    def test_a_checkpoint_being_copied_when_the_driver_is_killed_is_taken_again(self):
        self.kill_while_copying()
        with open(self.go, "w"):
            pass
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.check_kept()

    def test_copies_a_second_ctrl_c_cut_short_are_taken_by_the_next_run(self):
        env = dict(self.env, TUNE_TEST_ADOPT_DELAY_S="60", TUNE_GLOBAL_CHECKPOINT_S="0.1")
        p = self.start_tune("run", "exp.yaml", env=env)
        self.wait_for(lambda: len(self.trials("inflight")) == 1 and
                      self.trials("inflight")[0].get("adopting") and
                      self.trials("inflight")[0]["iteration"] >= 4, what="the copy under way")
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        t = self.trials("inflight")[0]
        self.assertEqual((t["status"], t["checkpoints"]), ("PENDING", []))
        self.assertEqual([a["seq"] for a in t["adopting"]], [1])
        with open(self.go, "w"):
            pass
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        t = self.trials("inflight")[0]
        self.assertEqual((t["status"], t["attempt"], t["failures"]), ("TERMINATED", 2, 0))
        self.assertNotIn("adopting", t)
        self.assertEqual([(c["dir"], c["iteration"]) for c in t["checkpoints"]],
                         [("checkpoint_000001", 2)])
        rows = self.results("inflight", t)
        self.assertEqual([r["training_iteration"] for r in rows], list(range(1, 13)))
        self.assertEqual([r["loss"] for r in rows], [1.0 / i for i in range(1, 13)])
        self.assertEqual(rows[2]["iterations_since_restore"], 1)  # went on from iteration 2
        with open(os.path.join(self.exp_dir("inflight"), "tune.log")) as f:
            log = f.read()
        self.assertIn("checkpoint_000001 was cut short as the run ends: the next run takes it "
                      "again", log)
        self.assertIn("checkpoint_000001 was being taken when the driver stopped: taken from ck",
                      log)

    def test_the_same_when_the_trial_ended_while_no_driver_ran(self):
        t = self.kill_while_copying()
        with open(self.go, "w"):
            pass
        self.wait_for(lambda: self.exit_record("inflight", t["trial_name"]) is not None,
                      what="trial end")
        self.tune("run", "exp.yaml", "--resume=auto", check=0)
        self.check_kept()


if __name__ == "__main__":
    unittest.main()
