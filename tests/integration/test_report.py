"""`tune report` and the driver's periodic report.html: a real experiment's report loaded in a real
headless Chromium, which must draw the charts, list every trial, log no error, request nothing
from the network, and never run a script smuggled in through a metric name."""
import os
import shutil
import subprocess
import time
import unittest

from browser import Browser
from harness import BUILD, PY, TuneTest

EVIL = "</script><script>alert(1)</script>"

# Reports `loss` (falling; lower for larger lr), `acc`, and a metric with a hostile name; a
# checkpoint every 5 iterations; lr=0.4 fails at iteration 8 (ERROR).
TRAIN = """
import os, sys, tempfile, time, tune_trial
lr = tune_trial.config()["lr"]
for i in range(1, 16):
    time.sleep(0.05)
    m = {"loss": 1.0 / (i * lr * 10) + 0.01, "acc": 1 - 1.0 / (i + lr), %r: i}
    if i %% 5 == 0:
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "w"), "w").write(str(i))
            tune_trial.report(m, checkpoint_dir=d)
    else:
        tune_trial.report(m)
    if lr == 0.4 and i == 8:
        sys.exit(3)
""" % EVIL

# Run in the page: what a person would see, measured (canvas pixels, table rows, sorting,
# filtering, the log-scale toggle).
CHECKS = r"""
(async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  for (let i = 0; i < 100 && document.body.getAttribute("data-rendered") !== "1"; i++) await sleep(50);
  function pixels(c, isBackground) {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let painted = 0, orange = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] === 0 || isBackground(d[i], d[i + 1], d[i + 2])) continue;
      painted++;
      if (d[i] > 200 && d[i + 1] > 80 && d[i + 1] < 170 && d[i + 2] < 80) orange++;
    }
    return {painted, orange, total: c.width * c.height};
  }
  const white = (r, g, b) => r > 245 && g > 245 && b > 245;
  const curve = document.querySelector("#curves canvas");
  const out = {
    rendered: document.body.getAttribute("data-rendered"),
    curve: curve ? pixels(curve, () => false) : null,
    parcoords: pixels(document.getElementById("parcoords"), white),
    rows: document.querySelectorAll("#trials tbody tr").length,
    metricOptions: Array.from(document.querySelectorAll("#metric option")).map((o) => o.textContent),
    bestRow: (document.querySelector("#trials tbody tr.best td") || {}).textContent,
    summary: document.getElementById("summary").textContent,
    scripts: document.querySelectorAll("script").length,
  };
  const th = document.querySelector("#trials thead th");  // "trial"
  th.click(); th.click();  // descending by name
  out.firstAfterSort = document.querySelector("#trials tbody tr td").textContent;
  const f = document.getElementById("filter");
  f.value = "ERROR";
  f.dispatchEvent(new Event("input"));
  out.rowsFiltered = document.querySelectorAll("#trials tbody tr").length;
  f.value = "";
  f.dispatchEvent(new Event("input"));
  const log = document.getElementById("logscale");
  log.click();
  await sleep(100);
  const logCurve = document.querySelector("#curves canvas");
  out.logCurve = logCurve ? pixels(logCurve, () => false) : null;
  log.click();
  await sleep(100);
  return out;
})()
"""


class ReportInBrowserTest(TuneTest):
    def run_experiment(self, name, period):
        self.write("train.py", TRAIN)
        self.write("exp.yaml", """
            name: %s
            trial: {command: ["%s", "train.py"]}
            param_space: {lr: {grid_search: [0.1, 0.2, 0.4, 0.8]}, width: {choice: [16, 64]}}
            seed: 3
            metric: loss
            mode: min
            failure_config: {max_failures: 0}
            report_period_s: %s
        """ % (name, PY, period))

    def load(self, path):
        b = Browser()
        try:
            b.open("file://" + path)
            checks = b.evaluate(CHECKS)
            shot = os.path.join(BUILD, "test-artifacts", "report.png")
            os.makedirs(os.path.dirname(shot), exist_ok=True)
            b.screenshot(shot)
            return checks, b.problems(), b.requests()
        finally:
            b.close()

    def test_the_report_of_a_real_experiment_draws_in_chromium(self):
        self.run_experiment("rep", 0)
        self.tune("run", "exp.yaml", "--quiet", check=1)  # lr=0.4 ends in ERROR
        self.assertFalse(os.path.exists(os.path.join(self.exp_dir("rep"), "report.html")),
                         "report_period_s: 0 writes no report")
        out = os.path.join(self.dir, "copy", "r.html")
        os.makedirs(os.path.dirname(out))
        # From a copy of the dir: the report needs nothing but the experiment's files.
        copy = os.path.join(self.dir, "copied")
        shutil.copytree(self.exp_dir("rep"), copy)
        p = self.tune("report", copy, "-o", out, check=0)
        self.assertEqual(p.stdout.strip(), out)
        checks, problems, requests = self.load(out)
        self.assertEqual(problems, [], "console errors, exceptions or dialogs (alert ran?)")
        self.assertEqual(requests, ["file://" + out], "the page requested something else")
        self.assertEqual(checks["rendered"], "1")
        self.assertEqual(checks["scripts"], 4, "a metric name added a script element")
        self.assertEqual(checks["rows"], 4)
        self.assertIn(EVIL, checks["metricOptions"])  # shown as text, never run
        self.assertIn("loss", checks["metricOptions"])
        # The curves: lines drawn, the best trial's in orange; the parallel coordinates drawn.
        self.assertGreater(checks["curve"]["painted"], 2000, checks["curve"])
        self.assertGreater(checks["curve"]["orange"], 200, checks["curve"])
        self.assertGreater(checks["logCurve"]["painted"], 2000, checks["logCurve"])
        self.assertGreater(checks["parcoords"]["painted"], 2000, checks["parcoords"])
        self.assertGreater(checks["parcoords"]["orange"], 50, checks["parcoords"])
        # The best: the lowest loss of the trials not in ERROR (lr=0.8), with its checkpoint.
        trials = {t["config"]["lr"]: t for t in self.trials("rep")}
        self.assertEqual(checks["bestRow"], trials[0.8]["trial_name"])
        self.assertIn(os.path.join(copy, trials[0.8]["trial_name"], "checkpoint_000003"),
                      checks["summary"])
        self.assertIn("ERROR1", checks["summary"])
        self.assertIn("TERMINATED3", checks["summary"])
        names = sorted(t["trial_name"] for t in trials.values())
        self.assertEqual(checks["firstAfterSort"], names[-1])
        self.assertEqual(checks["rowsFiltered"], 1)

    def test_asha_decisions_and_checkpoints_are_marked_on_the_curves(self):
        # The strongest first, so that the weaker ones, later, fall below asha's rung cutoffs.
        self.write("train.py", TRAIN)
        self.write("exp.yaml", """
            name: asha
            trial: {command: ["%s", "train.py"]}
            param_space: {lr: {grid_search: [1.6, 0.8, 0.2, 0.1, 0.05, 0.025]}}
            metric: loss
            mode: min
            scheduler: {type: asha, max_t: 15, grace_period: 1, reduction_factor: 3}
            failure_config: {max_failures: 0}
            report_period_s: 0
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=None)
        trials = self.trials("asha")
        want = {}
        for t in trials:
            if t["reason"] == "stopped":
                kind = "max_t" if t["cause"] == "max_t" else "stopped"
                want[kind] = want.get(kind, 0) + 1
            if t["status"] in ("TERMINATED", "ERROR"):
                want[t["status"]] = want.get(t["status"], 0) + 1
            if t["checkpoints"]:
                want["ckpt"] = want.get("ckpt", 0) + len(t["checkpoints"])
        self.assertGreater(want.get("stopped", 0), 0, "asha stopped no trial: %s" % trials)
        out = os.path.join(self.dir, "asha.html")
        self.tune("report", self.exp_dir("asha"), "-o", out, check=0)
        b = Browser()
        try:
            b.open("file://" + out)
            got = b.evaluate(r"""
            (async () => {
              for (let i = 0; i < 100 && document.body.getAttribute("data-rendered") !== "1"; i++)
                await new Promise((r) => setTimeout(r, 50));
              const c = document.querySelector("#curves canvas");
              const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
              let red = 0;  // the stop mark's colour (#c0392b), drawn nowhere else
              for (let i = 0; i < d.length; i += 4)
                if (Math.abs(d[i] - 0xc0) < 8 && Math.abs(d[i + 1] - 0x39) < 8 && Math.abs(d[i + 2] - 0x2b) < 8) red++;
              return {marks: document.getElementById("curves").getAttribute("data-marks"), red,
                      legend: Array.from(document.querySelectorAll("#legend [data-mark]")).map((e) => e.dataset.mark)};
            })()""")
            problems = b.problems()
            os.makedirs(os.path.join(BUILD, "test-artifacts"), exist_ok=True)
            b.screenshot(os.path.join(BUILD, "test-artifacts", "report-asha.png"))
        finally:
            b.close()
        self.assertEqual(problems, [])
        drawn = dict((kv.split(":")[0], int(kv.split(":")[1])) for kv in got["marks"].split())
        self.assertEqual(drawn, want)
        self.assertGreater(got["red"], 10, "no stop mark's pixels on the canvas")
        for kind in ("ckpt", "stopped", "max_t", "paused", "exploited", "TERMINATED", "ERROR"):
            self.assertIn(kind, got["legend"])

    def test_the_driver_refreshes_report_html_while_it_runs(self):
        self.run_experiment("live", 0.2)
        proc = self.start_tune("run", "exp.yaml", "--quiet")
        page = os.path.join(self.exp_dir("live"), "report.html")
        try:
            self.wait_for(lambda: os.path.exists(page), timeout=30, what="report.html")
            running = proc.poll() is None
        finally:
            proc.communicate(timeout=120)
        self.assertTrue(running, "report.html appeared only after the run")
        self.assertEqual(proc.returncode, 1)
        # The last one is of the final state: every trial ended.
        with open(page) as f:
            text = f.read()
        self.assertIn('"phase":"finished"', text)
        self.assertNotIn('"status":"RUNNING"', text)
        self.assertFalse("<script>alert(1)" in text, "the hostile metric name is in the page unescaped")


if __name__ == "__main__":
    unittest.main()
