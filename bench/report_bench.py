#!/usr/bin/env python3
"""The report at scale (run on demand, never part of the test suite).

Runs a real experiment of TRIALS trials x RESULTS results (each trial is one awk process printing
its results as fast as it can; a falling noisy loss and an accuracy), then measures:
  - `tune report`: wall time and the file's size, in bytes per million points (a point is one
    metric value of one result row);
  - rendering in headless Chromium: milliseconds from navigation start until the page's script
    has drawn everything (curves, parallel coordinates, table), as the page itself records it
    (body[data-render-ms]), the median of --repeat loads;
  - the same page's JSON alone parsed by Chromium (the floor any page holding this data pays).

  bench/report_bench.py [--trials 1000] [--results 1000] [--repeat 3] [--keep DIR]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from browser import Browser  # noqa: E402

TUNE = os.environ.get("TUNE_BIN") or os.path.join(HERE, "..", "build", "tune")

# The trial: one awk process (its program in a file: the command may not hold braces, which are
# config placeholders), seeded by its pid.
AWK = ('BEGIN { srand(s); r = 0.5 + rand(); for (i = 1; i <= n; i++) '
       'printf "{\\"loss\\": %.6f, \\"acc\\": %.6f}\\n", r / i + 0.01 * rand(), 1 - r / (i + 1) }\n')


def run_experiment(root, trials, results):
    exp = os.path.join(root, "exp.yaml")
    prog = os.path.join(root, "trial.awk")
    with open(prog, "w") as f:
        f.write(AWK)
    cmd = "awk -v s=$$ -v n=%d -f %s" % (results, prog)
    with open(exp, "w") as f:
        f.write("name: big\n"
                "trial: {command: [sh, -c, %s]}\n"
                "param_space: {lr: {loguniform: [0.0001, 0.1]}, layers: {randint: [1, 8]}}\n"
                "num_samples: %d\nseed: 1\nmetric: loss\nmode: min\nreport_period_s: 0\n"
                "tensorboard: false\nstorage_path: %s\n"
                % (json.dumps(cmd), trials, os.path.join(root, "results")))
    t0 = time.time()
    p = subprocess.run([TUNE, "run", exp, "--quiet"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("tune run failed: " + p.stderr[-2000:])
    return os.path.join(root, "results", "big"), time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--results", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="reuse/keep the experiment under this dir")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="tune-report-bench-")
    os.makedirs(root, exist_ok=True)
    exp_dir = os.path.join(root, "results", "big")
    if not os.path.exists(os.path.join(exp_dir, "experiment_state.json")):
        exp_dir, run_s = run_experiment(root, a.trials, a.results)
        print("experiment: %d trials x %d results run in %.1f s" % (a.trials, a.results, run_s))
    page = os.path.join(root, "report.html")
    t0 = time.time()
    subprocess.run([TUNE, "report", exp_dir, "-o", page], check=True, capture_output=True)
    report_s = time.time() - t0
    size = os.path.getsize(page)
    points = a.trials * a.results * 2  # loss and acc: the curves the page holds
    print("tune report: %.2f s, %.1f MB, %.1f MB per million points (a point: one value of one row)"
          % (report_s, size / 1e6, size / 1e6 / (points / 1e6)))
    # The JSON alone, for the floor: a page that only parses it.
    with open(page) as f:
        text = f.read()
    start = text.index('<script type="application/json" id="tune-data">')
    end = text.index("</script>", start)
    data_only = os.path.join(root, "data_only.html")
    with open(data_only, "w") as f:
        f.write("<!DOCTYPE html><html><body>" + text[start:end + 9] +
                "<script>JSON.parse(document.getElementById('tune-data').textContent);"
                "document.body.setAttribute('data-render-ms', String(Math.round(performance.now())));"
                "document.body.setAttribute('data-rendered', '1');</script></body></html>")
    wait = ("(async () => { for (let i = 0; i < 1200 && document.body.getAttribute('data-rendered')"
            " !== '1'; i++) await new Promise(r => setTimeout(r, 50));"
            " return [Number(document.body.getAttribute('data-render-ms')),"
            " document.body.getAttribute('data-stage-ms')]; })()")
    for label, path in (("report page", page), ("JSON parse only", data_only)):
        times = []
        for _ in range(a.repeat):
            b = Browser()
            try:
                b.open("file://" + path, timeout=300)
                ms, stages = b.evaluate(wait, timeout=300)
                times.append(ms)
                if stages:
                    print("  %s: %d ms (%s)" % (label, ms, stages))
                problems = b.problems()
            finally:
                b.close()
            if problems:
                print("  problems:", problems[:3])
        print("chromium, %s: median %.0f ms to drawn (runs: %s)"
              % (label, statistics.median(times), ", ".join("%.0f" % t for t in times)))
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
