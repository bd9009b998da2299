"""callbacks: commands told about the run's events, with a real shell script that records each
call's stdin; a failing callback never changes the run's exit code."""
import json
import os
import time
import unittest

from harness import PY, TuneTest

# 200 results in about a second, a checkpoint at the 100th; x == 3 fails at once.
TRIAL = """
import os, sys, tempfile, time, tune_trial
x = tune_trial.config()["x"]
if x == 3:
    tune_trial.report({"loss": 1.0})
    sys.exit(1)
for i in range(1, 201):
    if i == 100:
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "i"), "w").write(str(i))
            tune_trial.report({"loss": 1.0 / i}, checkpoint_dir=d)
    else:
        tune_trial.report({"loss": 1.0 / i})
    time.sleep(0.005)
"""

RECORD = """
#!/bin/sh
# Appends the event it is given (one JSON object on stdin) to the file named by $1.
cat >> "$1"
"""


class CallbackTest(TuneTest):
    def setUp(self):
        super().setUp()
        self.write("trial.py", TRIAL)
        self.write("record.sh", RECORD, mode=0o755)
        self.events = os.path.join(self.dir, "events.jsonl")

    def calls(self):
        with open(self.events) as f:
            return [json.loads(line) for line in f if line.strip()]

    def test_every_event_kind_in_order_with_results_batched(self):
        self.write("exp.yaml", """
            trial: {command: ["%s", trial.py]}
            param_space: {x: {grid_search: [1, 2, 3]}}
            metric: loss
            mode: min
            callbacks:
              - on: [trial_start, trial_result, trial_complete, trial_error, checkpoint,
                     experiment_end]
                command: [./record.sh, "%s"]
        """ % (PY, self.events))
        started = time.time()
        p = self.tune("run", "exp.yaml", "--quiet", check=1)  # x == 3 ends in ERROR
        elapsed = time.time() - started
        calls = self.calls()
        kinds = [c["event"] for c in calls]
        self.assertEqual(set(kinds), {"trial_start", "trial_result", "trial_complete",
                                      "trial_error", "checkpoint", "experiment_end"})
        self.assertEqual(kinds[-1], "experiment_end")
        self.assertEqual(kinds.count("experiment_end"), 1)
        self.assertEqual(calls[-1]["trials"], {"TERMINATED": 2, "ERROR": 1})
        # Per trial: started first, its results in order, ended last.
        per_trial = {}
        for c in calls:
            if c["event"] == "trial_result":
                for item in c["results"]:
                    per_trial.setdefault(item["trial_id"], []).append(
                        ("result", item["result"]["training_iteration"]))
            elif c["event"] != "experiment_end":
                per_trial.setdefault(c["trial_id"], []).append((c["event"], c.get("iteration")))
        names = {t["trial_id"]: t for t in self.trials("exp")}
        self.assertEqual(len(per_trial), 3)
        for tid, events in per_trial.items():
            x = names[tid]["config"]["x"]
            self.assertEqual(events[0][0], "trial_start")
            iters = [i for e, i in events if e == "result"]
            self.assertEqual(iters, list(range(1, len(iters) + 1)))
            if x == 3:
                self.assertEqual(events[-1][0], "trial_error")
                self.assertEqual(iters, [1])
            else:
                self.assertEqual(events[-1][0], "trial_complete")
                self.assertEqual(len(iters), 200)
                self.assertIn(("checkpoint", 100), events)
        # 401 results in a handful of calls: at most one a second (plus the first and last).
        result_calls = kinds.count("trial_result")
        self.assertLessEqual(result_calls, int(elapsed) + 3, (result_calls, elapsed))
        self.assertGreaterEqual(result_calls, 1)
        error = [c for c in calls if c["event"] == "trial_error"][0]
        self.assertIn("exit", error["error"])
        self.assertEqual(error["status"], "ERROR")
        ck = [c for c in calls if c["event"] == "checkpoint"][0]
        self.assertTrue(os.path.isdir(ck["checkpoint_path"]) or ck["checkpoint"].startswith(
            "checkpoint_"))
        self.assertNotIn("callback", p.stderr)  # none failed

    def test_a_failing_callback_is_logged_and_the_run_still_succeeds(self):
        self.write("exp.yaml", """
            trial: {command: ["%s", trial.py]}
            param_space: {x: {grid_search: [1, 2]}}
            callbacks:
              - {on: [trial_complete], command: [sh, -c, "echo nope here >&2; exit 2"]}
              - {on: [trial_start], command: [./does-not-exist.sh]}
              - {on: [experiment_end], command: [./record.sh, "%s"]}
        """ % (PY, self.events))
        p = self.tune("run", "exp.yaml", check=0)
        self.assertIn("callback 1 (sh) failed on trial_complete (exit code 2): nope here",
                      p.stderr)
        self.assertIn("callback 2 (does-not-exist.sh) could not start on trial_start", p.stderr)
        self.assertEqual([c["event"] for c in self.calls()], ["experiment_end"])
        self.assertTrue(all(t["status"] == "TERMINATED" for t in self.trials("exp")))


if __name__ == "__main__":
    unittest.main()
