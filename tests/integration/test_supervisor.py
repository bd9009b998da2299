"""The per-trial supervisor's guarantees, on real processes: an attempt owns its descendants (all
killed when it ends, output after that never counted for the next attempt), only its supervisor
can record its end, and every attempt's stdout/stderr stays in the trial's logs."""
import json
import os
import subprocess
import time
import unittest

from harness import BUILD, PY, TuneTest


def alive(pid):
    """True if `pid` runs (a zombie does not count)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class SupervisorTest(TuneTest):
    def exp(self, name, script, extra=""):
        self.write("exp.yaml", f"""
            name: {name}
            trial: {{command: ["{PY}", "{script}"]}}
            param_space: {{x: 1}}
            {extra}
            """)

    def trial_dir(self, name):
        return os.path.join(self.exp_dir(name), self.trials(name)[0]["trial_name"])

    def read(self, name, f):
        with open(os.path.join(self.trial_dir(name), f)) as fh:
            return fh.read()

    def tune_log(self, name):
        with open(os.path.join(self.exp_dir(name), "tune.log")) as f:
            return f.read()

    def test_a_setsid_grandchild_is_killed_and_its_output_never_counts_for_the_next_attempt(self):
        # Attempt 1 leaves a grandchild in its own session that prints results for 3 s, and
        # fails at once; attempt 2 prints its own results for 1.5 s.
        self.write("ghost.py", """
            import json, os, subprocess, sys, time
            d = os.environ["TUNE_TRIAL_DIR"]
            if not os.path.exists(os.path.join(d, "ghost.pid")):
                g = subprocess.Popen([sys.executable, "-c",
                    "import json, time\\n"
                    "for i in range(60):\\n"
                    "    print(json.dumps({'ghost': i}), flush=True)\\n"
                    "    time.sleep(0.05)\\n"], start_new_session=True)
                with open(os.path.join(d, "ghost.pid"), "w") as f:
                    f.write(str(g.pid))
                time.sleep(0.2)
                sys.exit(3)
            for i in range(6):
                print(json.dumps({"real": i}), flush=True)
                time.sleep(0.25)
            """)
        self.exp("ghost", "ghost.py", "failure_config: {max_failures: 1}")
        self.tune("run", "exp.yaml", check=0)
        t = self.trials("ghost")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(t["attempt"], 2)
        rows = self.results("ghost", t)
        self.assertEqual([r.get("real") for r in rows], list(range(6)),
                         "%d rows of another attempt" % len([r for r in rows if "real" not in r]))
        self.assertEqual([r["training_iteration"] for r in rows], list(range(1, 7)))
        with open(os.path.join(self.trial_dir("ghost"), "ghost.pid")) as f:
            ghost = int(f.read())
        self.assertFalse(alive(ghost), "the grandchild outlived its attempt")
        # Nothing of it reached the log after attempt 2 started.
        out = self.read("ghost", "stdout.log")
        self.assertIn("=== attempt 2 ===", out)
        self.assertNotIn("ghost", out.split("=== attempt 2 ===")[1])

    def test_every_descendant_is_killed_when_the_attempt_ends(self):
        # A double fork (the daemon idiom) and a child in its own process group, left running by
        # a trial that ends normally: both are gone once the trial's exit is recorded.
        self.write("leave.py", """
            import json, os, subprocess, sys, time
            d = os.environ["TUNE_TRIAL_DIR"]
            sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
            grp = subprocess.Popen(sleeper, process_group=0)
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    with open(os.path.join(d, "daemon.pid"), "w") as f:
                        f.write(str(os.getpid()))
                    time.sleep(60)
                os._exit(0)
            with open(os.path.join(d, "group.pid"), "w") as f:
                f.write(str(grp.pid))
            while not os.path.exists(os.path.join(d, "daemon.pid")):
                time.sleep(0.01)
            print(json.dumps({"loss": 1}), flush=True)
            """)
        self.exp("leave", "leave.py")
        t0 = time.time()
        self.tune("run", "exp.yaml", check=0)
        self.assertLess(time.time() - t0, 30)
        self.assertEqual(self.trials("leave")[0]["status"], "TERMINATED")
        for f in ("daemon.pid", "group.pid"):
            pid = int(self.read("leave", f))
            self.assertFalse(alive(pid), f + ": a descendant outlived its attempt")

    def test_a_forged_exit_record_is_ignored_and_the_real_end_recorded(self):
        # The trial writes an exit record saying it ended well, where it is told to write (its
        # dir) and where it could guess the supervisor's go, then runs on and fails.
        self.write("forge.py", """
            import json, os, sys, time
            d = os.environ["TUNE_TRIAL_DIR"]
            name = os.path.basename(d)
            exp = os.path.dirname(d)
            fake = {"attempt": 1, "exit_code": 0, "signal": None, "reason": "exited", "error": "",
                    "ended": time.time(), "pid": os.getpid(), "supervisor": os.getppid(),
                    "nonce": "0" * 32}
            with open(os.path.join(d, "exit.json"), "w") as f:
                json.dump(fake, f)
            # and appends it to the attempt log, where supervisors record exits
            with open(os.path.join(exp, ".tune", "attempts.log"), "a") as f:
                f.write(json.dumps(dict(fake, event="exit", trial=name)) + "\\n")
            for i in range(8):
                print(json.dumps({"i": i}), flush=True)
                time.sleep(0.3)  # past the driver's 1 s rescan, twice
            sys.exit(5)
            """)
        self.exp("forged", "forge.py")
        self.tune("run", "exp.yaml", check=1)
        t = self.trials("forged")[0]
        self.assertEqual(t["status"], "ERROR")
        self.assertIn("exit code 5", t["error"])
        self.assertEqual([r["i"] for r in self.results("forged", t)], list(range(8)))
        log = self.tune_log("forged")
        # (a forged line is only read, and warned about once, when the log is consulted)
        self.assertLessEqual(log.count("that its supervisor did not write"), 1, log)

    def test_every_attempt_keeps_its_output_and_errors_name_only_the_last_attempt(self):
        # Attempt 1 prints a partial last line and an error; attempt 2 prints results and
        # nothing on stderr, and fails: its error message must not quote attempt 1's stderr.
        self.write("twice.py", """
            import json, os, sys
            d = os.environ["TUNE_TRIAL_DIR"]
            first = not os.path.exists(os.path.join(d, "seen"))
            open(os.path.join(d, "seen"), "a").close()
            if first:
                print("out of attempt 1", flush=True)
                print("boom in attempt 1", file=sys.stderr, flush=True)
                sys.stdout.write("partial line")
                sys.stdout.flush()
                sys.exit(3)
            print(json.dumps({"loss": 0.5}), flush=True)
            sys.exit(4)
            """)
        self.exp("twice", "twice.py", "failure_config: {max_failures: 1}")
        self.tune("run", "exp.yaml", check=1)
        t = self.trials("twice")[0]
        self.assertEqual((t["status"], t["attempt"]), ("ERROR", 2))
        self.assertEqual(t["error"], "exit code 4")
        self.assertEqual(self.read("twice", "stdout.log"),
                         "out of attempt 1\npartial line\n=== attempt 2 ===\n"
                         + json.dumps({"loss": 0.5}) + "\n")
        self.assertEqual(self.read("twice", "stderr.log"),
                         "boom in attempt 1\n=== attempt 2 ===\n")
        # The marker is read as attempt 2's output, and is not a result.
        self.assertEqual([r["loss"] for r in self.results("twice", t)], [0.5])



    def test_a_second_attempt_never_starts_while_one_runs_in_the_trial_dir(self):
        # Each supervisor holds its trial dir's lock: one started there while another still
        # runs (only a damaged attempt log could ask for it) records a failed start naming the
        # first, and never runs its trial beside it.
        sup = os.path.join(BUILD, "tune-supervisor")
        d = os.path.join(self.dir, "trial")
        os.makedirs(d)
        lease = os.path.join(self.dir, "lease")
        open(lease, "w").close()

        def start(attempt, argv):
            record = os.path.join(self.dir, "exit-%d.json" % attempt)
            p = subprocess.Popen([sup, d, str(attempt), lease, "600", "1", self.dir, "null",
                                  record, "--", *argv], stdin=subprocess.PIPE,
                                 start_new_session=True)
            p.stdin.write(b"0" * 32)
            p.stdin.close()
            return p, record

        first, _ = start(1, [PY, "-c", "import time; print('one', flush=True); time.sleep(60)"])
        self.wait_for(lambda: "one" in open(os.path.join(d, "stdout.log")).read(),
                      what="attempt 1 running")
        second, record = start(2, [PY, "-c", "print('two', flush=True)"])
        self.assertEqual(second.wait(timeout=10), 0)
        with open(record) as f:
            rec = json.load(f)
        self.assertEqual(rec["reason"], "dir_busy")  # retried as a failure, not exec_failed
        self.assertIn("an earlier attempt of this trial still runs there (its supervisor, pid "
                      "%d, holds the trial dir): attempt 2 is not started" % first.pid,
                      rec["error"])
        self.assertIsNone(rec["pid"])
        first.terminate()  # the supervisor stops its trial and records that
        self.assertEqual(first.wait(timeout=20), 0)
        with open(os.path.join(d, "stdout.log")) as f:
            self.assertNotIn("two", f.read())
        # Once the first has ended, the next attempt starts as usual.
        third, record = start(3, [PY, "-c", "print('three', flush=True)"])
        self.assertEqual(third.wait(timeout=10), 0)
        with open(record) as f:
            self.assertEqual(json.load(f)["exit_code"], 0)
        with open(os.path.join(d, "stdout.log")) as f:
            self.assertIn("three", f.read())


if __name__ == "__main__":
    unittest.main()
