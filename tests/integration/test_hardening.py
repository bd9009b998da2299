"""Regression tests for the driver hardening work, each named after the item it guards: a driver
that must not crash, hang, lose or misattribute results when used as a hostile or unlucky user
would. Real binary, real trial processes, one scratch dir per test."""
import json
import os
import re
import signal
import subprocess
import time
import unittest

from harness import PY, TuneTest

# Reports `n` results, checkpointing through the Python helper every `every` iterations; restores
# from its checkpoint; fails its first attempt at iteration `fail_at` when asked to.
COUNTER = """
import json, os, sys, tempfile, time, tune_trial
n, every, fail_at, pause = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
start = 0
ck = tune_trial.get_checkpoint()
if ck:
    start = int(open(os.path.join(ck, "i")).read())
first = os.path.exists(os.path.join(os.environ["TUNE_TRIAL_DIR"], "failed-once")) is False
for i in range(start + 1, n + 1):
    if fail_at and i == fail_at and first:
        open(os.path.join(os.environ["TUNE_TRIAL_DIR"], "failed-once"), "w").close()
        sys.exit(3)
    d = None
    if every and i % every == 0:
        d = tempfile.mkdtemp()
        open(os.path.join(d, "i"), "w").write(str(i))
    tune_trial.report({"i": i, "loss": 1.0 / i}, checkpoint_dir=d)
    time.sleep(pause)
"""


class HardeningTest(TuneTest):
    def setUp(self):
        super().setUp()
        self.write("counter.py", COUNTER)

    def log(self, name):
        with open(os.path.join(self.exp_dir(name), "tune.log")) as f:
            return f.read()

    def test_item3_200_trials_that_each_fail_once(self):
        # A 40-value grid x num_samples 5, concurrency 4, each trial failing its first attempt:
        # this crashed the driver in 6 runs of 6 (a Trial& kept across growth of the trials).
        self.write("exp.yaml", """
            name: flaky
            trial: {command: ["%s", "counter.py", "3", "0", "2", "0"]}
            param_space: {x: {grid_search: [%s]}}
            num_samples: 5
            seed: 7
            max_concurrent_trials: 4
            failure_config: {max_failures: 1}
        """ % (PY, ", ".join(str(i) for i in range(40))))
        p = self.tune("run", "exp.yaml", "--quiet", timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        trials = self.trials("flaky")
        self.assertEqual(len(trials), 200)
        for t in trials:
            self.assertEqual((t["status"], t["attempt"], t["failures"]), ("TERMINATED", 2, 1), t["trial_name"])
            self.assertEqual(self.iterations("flaky", t), [1, 2, 3])

    def test_a_trial_dir_deleted_or_replaced_under_a_running_trial_fails_the_attempt(self):
        # What the attempt would write there from then on went nowhere, without a word, and the
        # trial ended TERMINATED with no result.json. Now the attempt is stopped within a second
        # as a failure, named, and the retry starts over in a new dir (its checkpoints went too).
        self.write("exp.yaml", """
            name: rmdir
            trial: {command: ["%s", "counter.py", "40", "3", "0", "0.1"]}
            param_space: {x: {grid_search: [1, 2]}}
            failure_config: {max_failures: 1}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("rmdir")) == 2 and all(
            len(self.results("rmdir", t)) >= 4 for t in self.trials("rmdir")), what="results")
        gone, moved = [os.path.join(self.exp_dir("rmdir"), t["trial_name"])
                       for t in self.trials("rmdir")]
        subprocess.run(["rm", "-rf", gone], check=True)
        os.rename(moved, moved + ".old")  # replaced: moved away, a new dir in its place
        os.mkdir(moved)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        log = self.log("rmdir")
        # (the trial's helper may have made it again before the driver looked: "replaced")
        self.assertRegex(log, "its dir '%s' was (deleted|replaced) while it ran" % re.escape(gone))
        self.assertIn("its dir '%s' was replaced while it ran" % moved, log)
        for t in self.trials("rmdir"):
            self.assertEqual((t["status"], t["attempt"], t["failures"]), ("TERMINATED", 2, 1))
            # The retry went on from the newest checkpoint in the new dir (one the trial saved
            # after the dir was gone, or none); the rows before it went with the old dir.
            rows = self.results("rmdir", t)
            got = [r["training_iteration"] for r in rows]
            self.assertEqual(got, list(range(got[0], 41)))
            self.assertEqual(rows[0]["iterations_since_restore"], 1)
            self.assertEqual(t["checkpoints"][-1]["iteration"], 39)
            for c in t["checkpoints"]:  # each one the state names is there
                self.assertTrue(os.path.isdir(os.path.join(
                    self.exp_dir("rmdir"), t["trial_name"], c["dir"])), c["dir"])

    def test_a_trial_that_crashes_on_its_deleted_dir_fails_for_that(self):
        # The trial notices its dir is gone within 10 ms and exits 3, long before the driver's
        # once-a-second look: the failure was put down to "exited with code 3" (seen in CI,
        # where the driver's look lost the race in the test above).
        self.write("watch.py", """
            import os, sys, time, tune_trial
            d = os.environ["TUNE_TRIAL_DIR"]
            first = not os.path.exists("watched")  # (in the test's dir, not the trial's)
            open("watched", "w").close()
            for i in range(1, 21):
                tune_trial.report({"i": i})
                end = time.time() + (30 if first and i == 1 else 0.05)
                while time.time() < end:
                    if not os.path.isdir(d):
                        sys.exit(3)
                    time.sleep(0.01)
        """)
        self.write("exp.yaml", """
            name: crash
            trial: {command: ["%s", "watch.py"]}
            param_space: {x: 1}
            failure_config: {max_failures: 1}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("crash")) == 1 and
                      len(self.results("crash", self.trials("crash")[0])) >= 1, what="a result")
        gone = os.path.join(self.exp_dir("crash"), self.trials("crash")[0]["trial_name"])
        subprocess.run(["rm", "-rf", gone], check=True)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        log = self.log("crash")
        self.assertRegex(log, "its dir '%s' was (deleted|replaced) while it ran" % re.escape(gone))
        self.assertNotIn("exit code 3", log)
        (t,) = self.trials("crash")
        self.assertEqual((t["status"], t["attempt"], t["failures"]), ("TERMINATED", 2, 1))

    def test_a_retry_after_the_trial_dir_was_deleted_starts_over_with_its_own_count(self):
        # Its only checkpoint (iteration 3) went with the dir: the retry starts from scratch,
        # and counts from 1, not from the checkpoint that is gone.
        self.write("once.py", """
            import json, os, sys, tempfile, time
            d = os.environ["TUNE_TRIAL_DIR"]
            for i in range(1, 31):
                result = {"i": i}
                if i == 3:
                    c = tempfile.mkdtemp(dir=d)
                    result["checkpoint"] = c
                print(json.dumps(result), flush=True)
                time.sleep(0.1)
            """)
        self.write("exp.yaml", """
            name: rmonce
            trial: {command: ["%s", "once.py"]}
            param_space: {x: 1}
            failure_config: {max_failures: 1}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("rmonce")) == 1 and len(
            self.results("rmonce", self.trials("rmonce")[0])) >= 5, what="results")
        t = self.trials("rmonce")[0]
        subprocess.run(["rm", "-rf", os.path.join(self.exp_dir("rmonce"), t["trial_name"])],
                       check=True)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("checkpoint_000001 is missing on disk: restarting from an earlier one",
                      self.log("rmonce"))
        t = self.trials("rmonce")[0]
        self.assertEqual((t["status"], t["attempt"], t["failures"]), ("TERMINATED", 2, 1))
        rows = self.results("rmonce", t)
        self.assertEqual([r["training_iteration"] for r in rows], list(range(1, 31)))
        self.assertEqual([r["i"] for r in rows], list(range(1, 31)))
        self.assertEqual([c["iteration"] for c in t["checkpoints"]], [3])

    def test_item8_experiment_dir_deleted_under_a_running_driver(self):
        self.write("exp.yaml", """
            name: doomed
            trial: {command: ["%s", "counter.py", "1000", "0", "0", "0.05"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("doomed")) == 2 and
                      len(self.results("doomed", self.trials("doomed")[1])) >= 3, what="results")
        subprocess.run(["rm", "-rf", self.exp_dir("doomed")], check=True)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 1, err)
        lines = [l for l in err.splitlines() if l.startswith("tune: error:")]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("was deleted", lines[0])
        self.assertNotIn("intact", err)
        self.assertNotIn("supervisor exited", err)
        self.assertFalse(os.path.exists(self.exp_dir("doomed")), "the driver recreated the dir")

    def test_item7_driver_stopped_past_the_orphan_timeout(self):
        # SIGSTOP the driver (a suspended laptop) for longer than orphan_timeout_s: supervisors
        # stop their trials; on SIGCONT those are re-queued from their checkpoint, not failed.
        self.write("exp.yaml", """
            name: napping
            trial: {command: ["%s", "counter.py", "30", "2", "0", "0.1"]}
            param_space: {x: {grid_search: [1, 2]}}
            orphan_timeout_s: 2
            failure_config: {max_failures: 0}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: all(len(self.results("napping", t)) >= 5 for t in self.trials("napping"))
                      and len(self.trials("napping")) == 2, what="results")
        p.send_signal(signal.SIGSTOP)
        time.sleep(5)
        p.send_signal(signal.SIGCONT)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        for t in self.trials("napping"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(t["failures"], 0)
            self.assertGreaterEqual(t["attempt"], 2)
            self.assertEqual(self.iterations("napping", t), list(range(1, 31)))
            self.assertEqual([r["i"] for r in self.results("napping", t)], list(range(1, 31)))
        # (the stop may land in the middle of a loop turn, in a state write say)
        self.assertRegex(self.log("napping"), "did not run for|a loop turn took")

    def test_item9_ctrl_c_and_a_trial_that_exits_0_on_sigterm(self):
        # What a PyTorch script with a SIGTERM handler does: saves and exits 0.
        self.write("graceful.py", """
            import os, signal, sys, time, tune_trial
            signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
            ck = tune_trial.get_checkpoint()
            start = int(open(os.path.join(ck, "i")).read()) if ck else 0
            for i in range(start + 1, 21):
                d = os.path.join(os.environ["TUNE_TRIAL_DIR"], "ck%d" % i)
                # (exist_ok: SIGTERM may come between making it and reporting it)
                os.makedirs(d, exist_ok=True)
                open(os.path.join(d, "i"), "w").write(str(i))
                tune_trial.report({"i": i}, checkpoint_dir=d)
                time.sleep(0.1)
        """)
        self.write("exp.yaml", """
            name: graceful
            trial: {command: ["%s", "graceful.py"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("graceful")) == 2 and
                      all(len(self.results("graceful", t)) >= 3 for t in self.trials("graceful")),
                      what="results")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130)
        for t in self.trials("graceful"):
            self.assertEqual((t["status"], t["reason"]), ("PENDING", "interrupted"))
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        for t in self.trials("graceful"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(t["failures"], 0)
            self.assertEqual([r["i"] for r in self.results("graceful", t)], list(range(1, 21)))

    def test_item11_checkpoint_paths_that_are_not_the_trials_own(self):
        # Trial x=2 reports as its checkpoint: trial x=1's dir, a symlink to it, a dir in its
        # workdir, one in the temp dir, and one elsewhere. Only the workdir and temp dirs are
        # taken, as copies; nothing of trial x=1 or elsewhere is moved or deleted.
        for d in ("work", "tmp", "outside/cko"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        with open(os.path.join(self.dir, "outside/cko/keep"), "w") as f:
            f.write("outside")
        self.write("work/attack.py", """
            import glob, json, os, sys, time
            me = os.environ["TUNE_TRIAL_DIR"]
            if sys.argv[1] == "1":
                open(os.path.join(me, "victim.txt"), "w").write("mine")
                time.sleep(3)
                print(json.dumps({"i": 1}))
                sys.exit(0)
            while not glob.glob(os.path.join(os.path.dirname(me), "trial_00000*", "victim.txt")):
                time.sleep(0.05)
            victim = glob.glob(os.path.join(os.path.dirname(me), "trial_00000*"))[0]
            os.symlink(victim, os.path.join(me, "link"))
            for name in ("ckw", os.path.join(os.environ["TMPDIR"], "ckt")):
                os.makedirs(name)
                open(os.path.join(name, "data"), "w").write(name)
            for path in (victim, os.path.join(me, "link"), "ckw",
                         os.path.join(os.environ["TMPDIR"], "ckt"), sys.argv[2]):
                print(json.dumps({"checkpoint": path}), flush=True)
        """)
        self.write("exp.yaml", """
            name: paths
            trial: {command: ["%s", "attack.py", "{x}", "%s"], workdir: work}
            param_space: {x: {grid_search: [1, 2]}}
        """ % (PY, os.path.join(self.dir, "outside/cko")))
        env = dict(self.env, TMPDIR=os.path.join(self.dir, "tmp"))
        self.tune("run", "exp.yaml", "--quiet", check=0, env=env)
        victim, attacker = self.trials("paths")
        vdir = os.path.join(self.exp_dir("paths"), victim["trial_name"])
        adir = os.path.join(self.exp_dir("paths"), attacker["trial_name"])
        with open(os.path.join(vdir, "victim.txt")) as f:
            self.assertEqual(f.read(), "mine")
        with open(os.path.join(self.dir, "outside/cko/keep")) as f:
            self.assertEqual(f.read(), "outside")
        # the copies were taken, the originals left where they were
        self.assertEqual(attacker["iteration"], 5)
        names = sorted(c["dir"] for c in attacker["checkpoints"])
        self.assertEqual(names, ["checkpoint_000001", "checkpoint_000002"])
        with open(os.path.join(adir, "checkpoint_000001/data")) as f:
            self.assertEqual(f.read(), "ckw")
        with open(os.path.join(adir, "checkpoint_000002/data")) as f:
            self.assertTrue(f.read().endswith("ckt"))
        self.assertTrue(os.path.isdir(os.path.join(self.dir, "work/ckw")))
        self.assertTrue(os.path.isdir(os.path.join(self.dir, "tmp/ckt")))
        log = self.log("paths")
        self.assertIn("inside the experiment but not in this trial's dir: refused", log)
        self.assertIn("is a symlink", log)
        self.assertIn("outside the trial dir, the temp dir and the workdir: refused", log)

    def test_item6_a_huge_checkpoint_is_copied_off_the_loop(self):
        # 30,000 files handed over from tmpfs to the disk: copied on the file worker, so the
        # loop keeps serving the other trial; tune.log ends with the longest loop stall.
        if not os.path.isdir("/dev/shm"):
            self.skipTest("no /dev/shm")
        shm = os.path.join("/dev/shm", os.path.basename(self.dir))
        os.makedirs(shm)
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", shm]))
        self.write("big.py", """
            import json, os, sys, time
            if sys.argv[1] == "1":
                d = os.path.join(os.environ["TMPDIR"], "big")
                os.makedirs(d)
                for i in range(30000):
                    with open(os.path.join(d, "f%05d" % i), "w") as f:
                        f.write("x" * 64)
                print(json.dumps({"i": 1, "checkpoint": d}), flush=True)
                sys.exit(0)
            for i in range(1, 81):
                print(json.dumps({"i": i}), flush=True)
                time.sleep(0.05)
        """)
        self.write("exp.yaml", """
            name: big
            trial: {command: ["%s", "big.py", "{x}"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % PY)
        env = dict(self.env, TMPDIR=shm)
        self.tune("run", "exp.yaml", "--quiet", check=0, env=env, timeout=600)
        big, other = self.trials("big")
        self.assertEqual([c["dir"] for c in big["checkpoints"]], ["checkpoint_000001"])
        ck = os.path.join(self.exp_dir("big"), big["trial_name"], "checkpoint_000001")
        self.assertEqual(len(os.listdir(ck)), 30000)
        self.assertEqual(len(os.listdir(os.path.join(shm, "big"))), 30000)  # left where it was
        self.assertEqual(other["iteration"], 80)
        stalls = re.findall(r"longest loop stall: (\d+) ms", self.log("big"))
        self.assertEqual(len(stalls), 1)
        self.assertLess(int(stalls[0]), 2000)

    def test_item21_leftovers_of_an_unfinished_deletion_are_removed_on_resume(self):
        # A driver killed between a state write and its deletions leaves checkpoint dirs that
        # no state names, in trials that are finished: resume removes them for every trial.
        self.write("exp.yaml", """
            name: leftovers
            trial: {command: ["%s", "counter.py", "6", "1", "0", "0"]}
            param_space: {x: {grid_search: [1, 2, 3]}}
            num_samples: 2
            checkpoint_config: {num_to_keep: 2}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        planted = []
        for t in self.trials("leftovers"):
            tdir = os.path.join(self.exp_dir("leftovers"), t["trial_name"])
            self.assertEqual(sorted(os.listdir(tdir)).count("checkpoint_000006"), 1)
            for name in ("checkpoint_000002", ".deleting_checkpoint_000003", ".copying_checkpoint_000007"):
                os.makedirs(os.path.join(tdir, name, "sub"))
                planted.append(os.path.join(tdir, name))
        # a symlink planted as a checkpoint dir: removed, its target untouched
        os.makedirs(os.path.join(self.dir, "target"))
        open(os.path.join(self.dir, "target", "keep"), "w").close()
        t0 = self.trials("leftovers")[0]
        os.symlink(os.path.join(self.dir, "target"),
                   os.path.join(self.exp_dir("leftovers"), t0["trial_name"], "checkpoint_000001"))
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        for p in planted:
            self.assertFalse(os.path.lexists(p), p)
        self.assertFalse(os.path.lexists(os.path.join(self.exp_dir("leftovers"), t0["trial_name"], "checkpoint_000001")))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "target", "keep")))
        for t in self.trials("leftovers"):
            tdir = os.path.join(self.exp_dir("leftovers"), t["trial_name"])
            self.assertEqual(sorted(n for n in os.listdir(tdir) if "checkpoint" in n),
                             ["checkpoint_000005", "checkpoint_000006"])

    def test_item17_last_row_says_done(self):
        self.write("exp.yaml", """
            name: done
            trial: {command: ["%s", "counter.py", "4", "0", "0", "0"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        for t in self.trials("done"):
            self.assertEqual([r["done"] for r in self.results("done", t)], [False, False, False, True])
            with open(os.path.join(self.exp_dir("done"), t["trial_name"], "progress.csv")) as f:
                rows = f.read().splitlines()
            col = rows[0].split(",").index("done")
            self.assertEqual([r.split(",")[col] for r in rows[1:]], ["false", "false", "false", "true"])

    def test_params_json_a_failed_attempt_changed_is_written_again_for_the_retry(self):
        # As Ray does: every attempt starts with the trial's config in params.json, whatever
        # an earlier attempt did to it (before, the retry read the changed file).
        self.write("rewrites.py", """
            import json, os, sys
            p = os.path.join(os.environ["TUNE_TRIAL_DIR"], "params.json")
            got = json.load(open(p))
            if not os.path.exists(p + ".seen"):
                open(p + ".seen", "w").close()
                json.dump({"lr": "changed by attempt 1"}, open(p, "w"))
                sys.exit(3)
            print(json.dumps({"lr_seen": got["lr"], "same": got == json.loads(os.environ["TUNE_CONFIG"])}))
            """)
        self.write("exp.yaml", """
            name: params
            trial: {command: ["%s", "rewrites.py"]}
            param_space: {lr: {grid_search: [0.1, 0.2]}}
            failure_config: {max_failures: 1}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        for t in self.trials("params"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 2))
            [row] = self.results("params", t)
            self.assertEqual((row["lr_seen"], row["same"]), (t["config"]["lr"], True))

    def test_item22_crash_loop_backs_off(self):
        self.write("exp.yaml", """
            name: crashloop
            trial: {command: ["%s", "-c", "import sys; print('boom', file=sys.stderr); sys.exit(1)"]}
            param_space: {x: {grid_search: [1]}}
            failure_config: {max_failures: -1}
        """ % PY)
        p = self.start_tune("run", "exp.yaml", "--quiet")
        time.sleep(6)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        attempts = self.trials("crashloop")[0]["attempt"]
        # Without back-off: ~11 attempts a second. With it: 0.25 + 0.5 + 1 + 2 s ... about 6.
        self.assertLessEqual(attempts, 8)
        self.assertGreaterEqual(attempts, 3)
        log = self.log("crashloop")
        # logged at its 1st, 2nd and 4th occurrence, not every time
        self.assertLess(log.count("exit code 1"), attempts)
        self.assertIn("times in a row", log)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class AgentFaultTest(TuneTest):
    """A tune-agent stopped (SIGSTOP, a debugger) or stuck: the driver neither waits for it for
    ever nor runs a second one beside it; what it held is started again, and nothing is lost."""

    def setUp(self):
        super().setUp()
        self.write("counter.py", COUNTER)

    def serving(self):
        """pid -> parent pid of every `tune-agent serve` process of this test: agents and the
        supervisors they fork (same command line). By command line and stat alone, which any
        user may read (an agent is not dumpable: as a non-root user its cwd cannot be read)."""
        found = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
                with open("/proc/%s/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if (os.path.basename(argv[0]) == b"tune-agent" and argv[1:2] == [b"serve"]
                    and self.dir.encode() in argv[2] and fields[0] not in ("Z", "X")):
                found[int(pid)] = int(fields[1])
        return found

    def agents(self):
        """The tune-agent processes of this test (an agent's parent is a driver)."""
        procs = self.serving()
        return [p for p, parent in procs.items() if parent not in procs]

    def children_of(self, pid):
        return [p for p, parent in self.serving().items() if parent == pid]

    def reporting(self, name, n):
        return lambda: sum(os.path.exists(os.path.join(self.exp_dir(name), t["trial_name"],
                                                       "result.json"))
                           for t in self.trials(name)) >= n

    def log(self, name):
        with open(os.path.join(self.exp_dir(name), "tune.log")) as f:
            return f.read()

    def test_a_stopped_agent_is_given_up_on_and_what_it_held_starts_again(self):
        # One trial at a time: the second one's launch goes to the stopped agent. Before, the
        # run waited for it for ever (and a Ctrl-C could not end it).
        self.write("exp.yaml", """
            name: stopped
            trial: {command: ["%s", "counter.py", "4", "0", "0", "0.25"]}
            param_space: {x: {grid_search: [1, 2, 3]}}
            max_concurrent_trials: 1
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        try:
            self.wait_for(self.reporting("stopped", 1), what="the first trial reporting")
            [agent] = self.agents()
            os.kill(agent, signal.SIGSTOP)
            _, err = p.communicate(timeout=90)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertRegex(self.log("stopped"),
                         r"tune-agent \(pid %d\) has not started a trial it was asked to start "
                         r"\d+ s ago; it is stopped \(by SIGSTOP or a terminal\)" % agent)
        self.assertFalse(alive(agent), "the stopped agent was left behind")
        for t in self.trials("stopped"):
            self.assertEqual((t["status"], t["failures"]), ("TERMINATED", 0), t["trial_name"])
            self.assertEqual([r["i"] for r in self.results("stopped", t)], [1, 2, 3, 4])

    def test_a_resume_beside_the_stopped_agent_of_a_killed_driver_stops_and_says_why(self):
        # The old agent still holds the experiment's agent lock: a second one beside it would
        # wait for ever, and the old one could launch what it holds at any later time.
        self.write("exp.yaml", """
            name: left
            trial: {command: ["%s", "counter.py", "12", "3", "0", "0.25"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(self.reporting("left", 2), what="both trials reporting")
        [agent] = self.agents()
        os.kill(agent, signal.SIGSTOP)
        p.kill()
        p.communicate()
        try:
            env = dict(self.env, TUNE_AGENT_WAIT_S="1")
            r = self.tune("run", "exp.yaml", "--resume=auto", env=env, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertRegex(r.stderr, r"the tune-agent of an earlier driver \(pid %d, stopped "
                             r"\(by SIGSTOP or a terminal\): `kill -CONT %d`\) still holds "
                             r"\S+agent-lock after 1 s" % (agent, agent))
        finally:
            os.kill(agent, signal.SIGCONT)
        self.wait_for(lambda: not alive(agent), what="the old agent to finish")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=90)
        for t in self.trials("left"):
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertEqual([r["i"] for r in self.results("left", t)], list(range(1, 13)))

    def test_ctrl_c_ends_a_run_whose_supervisor_was_stopped(self):
        # The SIGTERM of a stop reaches a stopped supervisor only once it is continued: the
        # driver continues it (before, one Ctrl-C never finished).
        self.write("exp.yaml", """
            name: supstop
            trial: {command: ["%s", "counter.py", "400", "0", "0", "0.1"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        try:
            self.wait_for(self.reporting("supstop", 2), what="both trials reporting")
            [agent] = self.agents()
            sups = self.children_of(agent)
            self.assertEqual(len(sups), 2)
            os.kill(sups[0], signal.SIGSTOP)
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertEqual(p.returncode, 130, err[-2000:])
        for t in self.trials("supstop"):
            self.assertEqual(t["status"], "PENDING", t["trial_name"])  # resumable, not lost

    def test_a_trial_dir_replaced_by_a_symlink_is_refused_and_what_it_points_to_untouched(self):
        self.write("exp.yaml", """
            name: sym
            trial: {command: ["%s", "counter.py", "400", "2", "0", "0.05"]}
            param_space: {x: 1}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(self.reporting("sym", 1), what="the trial reporting")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        [t] = self.trials("sym")
        tdir = os.path.join(self.exp_dir("sym"), t["trial_name"])
        victim = os.path.join(self.dir, "victim")
        os.rename(tdir, victim)
        for leftover in ("checkpoint_000999", ".copying_checkpoint_000005", ".staged_checkpoint_x"):
            os.makedirs(os.path.join(victim, leftover))
        os.symlink(victim, tdir)
        before = sorted(os.listdir(victim))
        r = self.tune("run", "exp.yaml", "--resume=auto")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("'%s' is a symbolic link: a trial dir is never written or cleaned through "
                      "one" % tdir, r.stderr)
        self.assertEqual(sorted(os.listdir(victim)), before)

    def test_a_trial_dir_someone_else_has_locked_fails_the_attempt_naming_the_holder(self):
        # Only a supervisor should hold a trial dir's lock; another holder makes the attempt
        # fail, retried like any failure, with that holder named (not blamed on a supervisor).
        self.write("exp.yaml", """
            name: held
            trial: {command: ["%s", "counter.py", "400", "0", "0", "0.05"]}
            param_space: {x: 1}
            failure_config: {max_failures: 1}
        """ % PY)
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(self.reporting("held", 1), what="the trial reporting")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        [t] = self.trials("held")
        tdir = os.path.join(self.exp_dir("held"), t["trial_name"])
        # (its own session: the sleep it runs holds the lock too, and is killed with it)
        holder = subprocess.Popen(["flock", tdir, "sleep", "60"], start_new_session=True)

        def locked():
            with open("/proc/locks") as f:
                return any(" FLOCK " in line and " %d " % holder.pid in line for line in f)
        try:
            self.wait_for(locked, what="the flock")
            r = self.tune("run", "exp.yaml", "--resume=auto", timeout=60)
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(self.log("held"), r"another process \(pid %d, 'flock'\) holds the trial "
                         r"dir's lock: attempt 2 is not started beside it\); retrying" % holder.pid)
        [t] = self.trials("held")
        self.assertEqual((t["status"], t["failures"]), ("ERROR", 2))

if __name__ == "__main__":
    unittest.main()
