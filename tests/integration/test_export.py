"""`tune export` of a real experiment: CSV (read back with Python's csv module), JSON and JSON
lines, one row per trial or every result row."""
import csv
import io
import json
import os

from harness import PY, TuneTest

TRAIN = """
import os, tempfile, tune_trial
c = tune_trial.config()
for i in range(1, 5):
    m = {"loss": abs(i - 2) + c["lr"], "note": "a,\\"quoted\\"\\nvalue"}
    if i == 2:
        with tempfile.TemporaryDirectory() as d:
            tune_trial.report(m, checkpoint_dir=d)
    else:
        tune_trial.report(m)
"""


class ExportTest(TuneTest):
    def setUp(self):
        super().setUp()
        self.write("train.py", TRAIN)
        self.write("exp.yaml", """
            name: ex
            trial: {command: ["%s", "train.py"]}
            param_space: {lr: {grid_search: [0.1, 0.2]}, opt: {name: sgd, mom: 0.9}}
            metric: loss
            mode: min
            report_period_s: 0
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        self.by_lr = {t["config"]["lr"]: t for t in self.trials("ex")}

    def test_trials_as_csv_json_and_jsonl(self):
        out = self.tune("export", "ex", "--format", "csv", check=0).stdout
        rows = list(csv.DictReader(io.StringIO(out)))
        self.assertEqual(len(rows), 2)
        row = {r["trial_name"]: r for r in rows}[self.by_lr[0.1]["trial_name"]]
        self.assertEqual(row["status"], "TERMINATED")
        self.assertEqual(row["config/lr"], "0.1")
        self.assertEqual(row["config/opt/mom"], "0.9")
        self.assertEqual(row["last/training_iteration"], "4")
        self.assertEqual(row["best/training_iteration"], "2")
        self.assertEqual(row["best/loss"], "0.1")
        self.assertEqual(row["last/note"], 'a,"quoted"\nvalue')  # quoted and read back whole
        self.assertEqual(row["best_checkpoint"],
                         os.path.join(os.path.realpath(self.exp_dir("ex")),
                                      self.by_lr[0.1]["trial_name"], "checkpoint_000001"))
        as_json = json.loads(self.tune("export", "ex", "--format", "json", check=0).stdout)
        lines = self.tune("export", "ex", "--format", "jsonl", check=0).stdout.splitlines()
        self.assertEqual(as_json, [json.loads(l) for l in lines])
        self.assertEqual(len(as_json), 2)

    def test_all_results(self):
        out = self.tune("export", "ex", "--all-results", check=0).stdout
        rows = list(csv.DictReader(io.StringIO(out)))
        self.assertEqual(len(rows), 8)
        self.assertEqual(list(rows[0])[:4], ["trial_id", "trial_name", "training_iteration", "config/lr"])
        for r in rows:
            lr = float(r["config/lr"])
            self.assertAlmostEqual(float(r["loss"]), abs(int(r["training_iteration"]) - 2) + lr)
        lines = self.tune("export", "ex", "--all-results", "--format", "jsonl", check=0).stdout
        self.assertEqual(len(lines.splitlines()), 8)

    def test_a_torn_result_line_is_left_out_and_said(self):
        name = self.by_lr[0.2]["trial_name"]
        path = os.path.join(self.exp_dir("ex"), name, "result.json")
        with open(path, "a") as f:
            f.write('{"loss": 0.5, "training_iter')  # a copy cut short
        for args in (["--all-results"], ["--all-results", "--format", "jsonl"], []):
            p = self.tune("export", "ex", *args, check=0)
            said = [l for l in p.stderr.splitlines() if "warning" in l]
            self.assertEqual(len(said), 1, p.stderr)
            self.assertIn("1 line(s) of result.json in 1 trial(s)", said[0])
            self.assertIn(path, said[0])
        rows = list(csv.DictReader(io.StringIO(p.stdout)))
        self.assertEqual(len(rows), 2)
        lines = self.tune("export", "ex", "--all-results", "--format", "jsonl", check=0).stdout
        self.assertEqual(len(lines.splitlines()), 8)

    def test_bad_format_and_missing_experiment_are_usage_errors(self):
        p = self.tune("export", "ex", "--format", "xml")
        self.assertEqual(p.returncode, 2)
        p = self.tune("export", "nope")
        self.assertEqual(p.returncode, 2)
        self.assertIn("no experiment 'nope'", p.stderr)
