"""The read-only views: `tune status`, `tune ls`, `tune checkpoints ls|best`, and the run
summary — honest about trials in ERROR, a dead driver, and cheap on big experiments."""
import json
import os
import re
import signal
import subprocess
import time
import unittest

from harness import PY, TUNE, TuneTest

# x=1 reports the best loss, then fails (ERROR, max_failures 0); x=2 ends normally.
ERRORS_BEST = """
import os, sys, tempfile, tune_trial
x = tune_trial.config()["x"]
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "x"), "w").write(str(x))
    tune_trial.report({"loss": 0.1 if x == 1 else 0.5}, checkpoint_dir=d)
sys.exit(1 if x == 1 else 0)
"""


class BestSkipsErroredTest(TuneTest):
    def run_errors_best(self, name):
        """Runs ERRORS_BEST as experiment `name`; returns the run and its trials by x."""
        self.write("report.py", ERRORS_BEST)
        self.write("exp.yaml", """
            name: %s
            trial: {command: ["%s", "report.py"]}
            param_space: {x: {grid_search: [1, 2]}}
            metric: loss
            mode: min
            failure_config: {max_failures: 0}
        """ % (name, PY))
        run = self.tune("run", "exp.yaml", "--quiet", check=1)
        return run, {t["config"]["x"]: t for t in self.trials(name)}

    def test_best_leaves_out_error_trials_unless_asked(self):
        run, by_x = self.run_errors_best("errbest")
        self.assertEqual(by_x[1]["status"], "ERROR")
        self.assertEqual(by_x[2]["status"], "TERMINATED")
        good = os.path.join(self.exp_dir("errbest"), by_x[2]["trial_name"], "checkpoint_000001")
        bad = os.path.join(self.exp_dir("errbest"), by_x[1]["trial_name"], "checkpoint_000001")
        self.assertIn("best trial: " + by_x[2]["trial_name"], run.stdout)
        self.assertEqual(self.tune("checkpoints", "best", "errbest", check=0).stdout, good + "\n")
        self.assertEqual(self.tune("checkpoints", "best", "errbest", "--include-errored",
                                   check=0).stdout, bad + "\n")
        ls = json.loads(self.tune("checkpoints", "ls", "errbest", "--format", "json", check=0).stdout)
        self.assertEqual([r["path"] for r in ls], [good])
        ls = json.loads(self.tune("checkpoints", "ls", "errbest", "--format", "json",
                                  "--include-errored", check=0).stdout)
        self.assertEqual([r["path"] for r in ls], [bad, good])

    def test_best_never_prints_a_path_that_does_not_exist(self):
        # The state names a checkpoint the head has no copy of (moved away here; for one saved
        # on an SSH host and not pulled yet see test_ssh): best says so, prints no path.
        _, by_x = self.run_errors_best("remote")
        good = os.path.join(self.exp_dir("remote"), by_x[2]["trial_name"], "checkpoint_000001")
        os.rename(good, good + ".away")
        r = self.tune("checkpoints", "best", "remote", check=1)
        self.assertEqual(r.stdout, "")
        self.assertIn("is missing from the head", r.stderr)
        os.rename(good + ".away", good)
        self.assertEqual(self.tune("checkpoints", "best", "remote", check=0).stdout, good + "\n")


class ConcurrencyNoteTest(TuneTest):
    def test_capped_concurrency_is_explained_in_log_and_table_header(self):
        self.write("exp.yaml", """
            name: capped
            trial: {command: ["sh", "-c", "sleep 0.3; echo '{{\\"v\\": 1}}'"]}
            param_space: {x: {grid_search: [1, 2, 3]}}
            max_concurrent_trials: 8
            hosts: [{local: {cpus: 2}}]
        """)
        env = dict(self.env, TUNE_PROGRESS_PERIOD_S="0.1")
        p = self.tune("run", "exp.yaml", check=0, env=env)
        why = "max_concurrent_trials is 8 but at most 2 trials fit at once (local 2 CPUs for 1 CPU per trial)"
        with open(os.path.join(self.exp_dir("capped"), "tune.log")) as f:
            self.assertEqual(f.read().count(why), 1)
        header = [l for l in p.stderr.splitlines() if l.startswith("note: ")]
        self.assertTrue(header, p.stderr)
        self.assertTrue(all(l == "note: " + why for l in header), header)
        # Nothing to say when everything fits.
        p = self.tune("run", "exp.yaml", "--name", "fits", "--max-concurrent", "2", check=0, env=env)
        self.assertNotIn("note:", p.stderr)
        with open(os.path.join(self.exp_dir("fits"), "tune.log")) as f:
            self.assertNotIn("max_concurrent_trials is", f.read())


# x=1 runs until the file 'release' exists; x=2 until 'die' exists; both report as they go.
WAITER = """
import os, sys, time, tune_trial
x = tune_trial.config()["x"]
i = 0
while not os.path.exists(os.path.join(%r, "release" if x == 1 else "die")):
    i += 1
    tune_trial.report({"loss": 1.0 / i})
    time.sleep(0.1)
"""


class DriverGoneTest(TuneTest):
    def test_status_after_kill_9_tells_detached_from_interrupted_and_how_to_resume(self):
        self.write("waiter.py", WAITER % self.dir)
        self.write("exp.yaml", """
            name: gone
            trial: {command: ["%s", "waiter.py"]}
            param_space: {x: {grid_search: [1, 2]}}
            metric: loss
            mode: min
            max_concurrent_trials: 2
            hosts: [{local: {cpus: 2}}]
        """ % PY)
        driver = self.start_tune("run", "exp.yaml", "--quiet")
        self.wait_for(lambda: [t["iteration"] > 0 for t in json.loads(
            self.tune("status", "gone", "--format", "json").stdout)["trials"]] == [True, True],
                      what="both trials running")
        alive = self.tune("status", "gone", check=0).stdout
        self.assertIn("driver: pid %d" % driver.pid, alive)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        # x=2's process ends after its driver: its supervisor records that and exits.
        open(os.path.join(self.dir, "die"), "w").close()
        names = {t["config"]["x"]: t["trial_name"] for t in self.trials("gone")}
        d2 = os.path.join(self.exp_dir("gone"), names[2])
        self.wait_for(lambda: self.exit_record("gone", names[2]) is not None
                      and not [p for p in self.processes_under(d2)], what="x=2's supervisor to exit")
        out = self.tune("status", "gone", check=0).stdout
        self.assertIn("(driver gone)", out)
        self.assertNotIn("(running)", out)
        self.assertRegex(out, r"driver: gone \(pid %d " % driver.pid)
        self.assertRegex(out, r"still running detached .*: %s \(supervisor pid \d+\)\n" % re.escape(names[1]))
        self.assertRegex(out, r"interrupted .*: %s\n" % re.escape(names[2]))
        resume = [l for l in out.splitlines() if l.startswith("resume with: ")]
        self.assertEqual(resume, ["resume with: tune run %s --resume=auto" % os.path.join(self.dir, "exp.yaml")])
        js = json.loads(self.tune("status", "gone", "--format", "json", check=0).stdout)
        self.assertFalse(js["driver"]["alive"])
        self.assertEqual({t["trial_name"]: t.get("running") for t in js["trials"]},
                         {names[1]: "detached", names[2]: "interrupted"})
        # The printed command resumes it: the detached trial is re-attached and finishes.
        open(os.path.join(self.dir, "release"), "w").close()
        cmd = resume[0][len("resume with: tune "):].split(" ")
        self.tune(*cmd, "--quiet", check=0)
        self.assertEqual([t["status"] for t in self.trials("gone")], ["TERMINATED"] * 2)
        out = self.tune("status", "gone", check=0).stdout
        self.assertIn("(finished)", out)
        self.assertNotIn("resume with", out)

    def test_resume_command_names_the_dir_when_the_file_does_not_lead_there(self):
        self.write("sub/exp.yaml", """
            trial: {command: ["sh", "-c", "sleep 30"]}
            param_space: {x: 1}
        """)
        driver = self.start_tune("run", "sub/exp.yaml", "--quiet", "--name", "other-name",
                                 "--set", "num_samples=1")
        self.wait_for(lambda: [t["status"] for t in self.trials("other-name")] == ["RUNNING"],
                      what="a running trial")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        out = self.tune("status", "other-name", check=0).stdout
        self.assertIn("resume with: tune run %s --resume=auto --set num_samples=1 --name other-name "
                      "--storage-path %s\n" % (os.path.join(self.dir, "sub", "exp.yaml"), self.storage), out)
        for pid in self.processes_under(self.dir):
            os.kill(pid, signal.SIGKILL)


def write_big_state(exp_dir, trials, config_bytes, counts=True):
    """An experiment_state.json as tune writes it (header line, one trial per line), finished."""
    os.makedirs(exp_dir, exist_ok=True)
    head = {"version": 1, "name": os.path.basename(exp_dir),
            "searcher": {"seed": 1, "total_trials": trials, "next_index": trials},
            "start_time": 1.0, "elapsed_s": 2.0, "phase": "finished", "metric": "loss",
            "mode": "min", "hosts": {"h": "up"}}
    if counts:
        head["counts"] = {"TERMINATED": trials}
    with open(os.path.join(exp_dir, "experiment_state.json"), "w") as f:
        f.write(json.dumps(head, separators=(",", ":"))[:-1] + ',"trials":[\n')
        for i in range(trials):
            t = {"trial_id": "%05d" % i, "trial_name": "trial_%05d" % i, "index": i,
                 "config": {"i": i, "blob": "b" * config_bytes}, "status": "TERMINATED",
                 "attempt": 1, "failures": 0, "host": "h", "error": "", "iteration": 3,
                 "time_total_s": 1.5, "last_result": {"loss": 0.5, "training_iteration": 3},
                 "metrics": {"loss": {"last": 0.5, "min": 0.4, "max": 0.9}}, "checkpoints": [],
                 "checkpoint_seq": 0, "stdout_offset": 10, "attempt_started": 1.0,
                 "restore_iteration": 0, "time_base": 0, "gpu_ids": []}
            f.write(json.dumps(t, separators=(",", ":")) + (",\n" if i + 1 < trials else "\n"))
        f.write("]}\n")


def max_rss_kb(argv, env):
    """Peak RSS of one command, measured in a fresh process whose only child it is."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([PY, "-c", probe, *argv], env=env, capture_output=True, text=True, check=True)
    code, kb = out.stdout.split()
    return int(code), int(kb)


class BigStateTest(TuneTest):
    def test_ls_reads_the_header_line_only(self):
        self.write("exp.yaml", """
            name: small
            trial: {command: ["sh", "-c", "echo '{{\\"loss\\": 1}}'"]}
            param_space: {x: {grid_search: [1, 2, 3]}}
        """)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        path = os.path.join(self.exp_dir("small"), "experiment_state.json")
        with open(path) as f:
            lines = f.read().split("\n")
        self.assertTrue(lines[0].endswith('"trials":['), lines[0])
        lines[2] = '{"trial_id": broken'  # the second trial's line: torn
        with open(path, "w") as f:
            f.write("\n".join(lines))
        ls = json.loads(self.tune("ls", "--format", "json", check=0).stdout)
        self.assertEqual([(e["name"], e["counts"]) for e in ls], [("small", {"TERMINATED": 3})])
        self.assertIn("small  (finished, 3 trials)  3 TERMINATED", self.tune("ls", check=0).stdout)
        # status reads the trials one line at a time: the first row is out before the torn line.
        st = self.tune("status", "small", check=2)
        self.assertIn("trial_00000_x=1", st.stdout)
        self.assertNotIn("trial_00002", st.stdout)
        self.assertIn("experiment_state.json: line 3 (byte ", st.stderr)
        self.assertEqual(st.stderr.count("\n"), 1)

    def test_ls_falls_back_to_the_whole_state_written_by_an_older_tune(self):
        write_big_state(self.exp_dir("old"), 4, 10, counts=False)
        ls = json.loads(self.tune("ls", "--format", "json", check=0).stdout)
        self.assertEqual(ls[0]["counts"], {"TERMINATED": 4})

    def test_status_and_ls_memory_stay_below_the_state_size(self):
        write_big_state(self.exp_dir("tiny"), 2, 10)
        _, tiny_kb = max_rss_kb([TUNE, "status", "tiny"], self.env)
        write_big_state(self.exp_dir("big"), 2000, 10000)
        size_kb = os.path.getsize(os.path.join(self.exp_dir("big"), "experiment_state.json")) // 1024
        self.assertGreater(size_kb, 19000)
        code, status_kb = max_rss_kb([TUNE, "status", "big"], self.env)
        self.assertEqual(code, 0)
        code, ls_kb = max_rss_kb([TUNE, "ls"], self.env)
        self.assertEqual(code, 0)
        # Reading the whole state costs ~4x its size; one line at a time, a few MB at most.
        self.assertLess(status_kb - tiny_kb, 5000, "tune status holds the state in memory")
        self.assertLess(ls_kb - tiny_kb, 5000, "tune ls holds the state in memory")
        out = self.tune("status", "big", check=0).stdout
        self.assertEqual(out.count("TERMINATED"), 2001)  # every row, and the counts line


if __name__ == "__main__":
    unittest.main()
