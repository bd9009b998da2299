#!/usr/bin/env python3
"""The report at scale (run on demand, never part of the test suite).

Runs a real experiment of TRIALS trials x RESULTS results (each trial is one awk process printing
its results as fast as it can; a falling noisy loss and an accuracy), then measures:
  - `tune report`: wall time and the file's size, in bytes per million points (a point is one
    metric value of one result row);
  - rendering in headless Chromium: milliseconds from navigation start until the page's script
    has drawn everything (curves, parallel coordinates, table), as the page itself records it
    (body[data-render-ms]), the median of --repeat loads;
  - the same page's data alone decoded by Chromium (the floor any page holding this data pays);
  - with --baseline, the same for another build in the same run (interleaved), and the ratios.

  bench/report_bench.py [--trials 1000] [--results 1000] [--repeat 3] [--keep DIR]
                        [--baseline OTHER_TUNE_BINARY]
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


def data_only_page(page, root, tag):
    """A page holding only `page`'s data elements and decoding them (JSON.parse, and base64 into
    a typed array where the page has binary columns): the floor any page with this data pays."""
    with open(page) as f:
        text = f.read()
    parts, pos = [], 0
    while True:
        start = text.find('<script type="application/', pos)
        if start < 0:
            break
        end = text.index("</script>", start) + 9
        parts.append(text[start:end])
        pos = end
    out = os.path.join(root, "data_only_%s.html" % tag)
    with open(out, "w") as f:
        f.write("<!DOCTYPE html><html><body>" + "".join(parts) +
                "<script>JSON.parse(document.getElementById('tune-data').textContent);"
                "var s = document.getElementById('tune-series');"
                "if (s) { var b = Uint8Array.fromBase64 ? Uint8Array.fromBase64(s.textContent)"
                " : Uint8Array.from(atob(s.textContent), (c) => c.charCodeAt(0));"
                " new Float32Array(b.buffer, 0, b.length >> 2); }"
                "document.body.setAttribute('data-render-ms', String(Math.round(performance.now())));"
                "document.body.setAttribute('data-rendered', '1');</script></body></html>")
    return out


WAIT = ("(async () => { for (let i = 0; i < 1200 && document.body.getAttribute('data-rendered')"
        " !== '1'; i++) await new Promise(r => setTimeout(r, 50));"
        " return [Number(document.body.getAttribute('data-render-ms')),"
        " document.body.getAttribute('data-stage-ms')]; })()")


def load_ms(path):
    b = Browser()
    try:
        b.open("file://" + path, timeout=300)
        ms, stages = b.evaluate(WAIT, timeout=300)
        problems = b.problems()
    finally:
        b.close()
    if problems:
        print("  problems:", problems[:3])
    return ms, stages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--results", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="reuse/keep the experiment under this dir")
    ap.add_argument("--baseline", help="another tune binary (e.g. an older build) measured in the"
                    " same run, on the same experiment, interleaved with this one")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="tune-report-bench-")
    os.makedirs(root, exist_ok=True)
    exp_dir = os.path.join(root, "results", "big")
    if not os.path.exists(os.path.join(exp_dir, "experiment_state.json")):
        exp_dir, run_s = run_experiment(root, a.trials, a.results)
        print("experiment: %d trials x %d results run in %.1f s" % (a.trials, a.results, run_s))
    points = a.trials * a.results * 2  # loss and acc: the curves the page holds
    builds = [("this", TUNE)] + ([("baseline", a.baseline)] if a.baseline else [])
    report_s, pages = {}, {}
    for _ in range(a.repeat):  # interleaved, so both see the same load on the machine
        for tag, binary in builds:
            page = os.path.join(root, "report_%s.html" % tag)
            t0 = time.time()
            subprocess.run([binary, "report", exp_dir, "-o", page], check=True, capture_output=True)
            report_s.setdefault(tag, []).append(time.time() - t0)
            pages[tag] = page
    for tag, _ in builds:
        size = os.path.getsize(pages[tag])
        print("%s: tune report median %.2f s (runs: %s), %.1f MB, %.2f MB per million points"
              % (tag, statistics.median(report_s[tag]), ", ".join("%.2f" % t for t in report_s[tag]),
                 size / 1e6, size / 1e6 / (points / 1e6)))
    kinds = [(tag, "report page", pages[tag]) for tag, _ in builds] + \
            [(tag, "data alone", data_only_page(pages[tag], root, tag)) for tag, _ in builds]
    times = {}
    for _ in range(a.repeat):
        for tag, label, path in kinds:
            ms, stages = load_ms(path)
            times.setdefault((tag, label), []).append(ms)
            if stages:
                print("  %s %s: %d ms (%s)" % (tag, label, ms, stages))
    med = {k: statistics.median(v) for k, v in times.items()}
    for (tag, label), v in times.items():
        print("chromium, %s %s: median %.0f ms to drawn (runs: %s)"
              % (tag, label, med[(tag, label)], ", ".join("%.0f" % t for t in v)))
    if a.baseline:
        print("ratios this/baseline: tune report %.2f, page size %.2f, report page %.2f, data alone %.2f"
              % (statistics.median(report_s["this"]) / statistics.median(report_s["baseline"]),
                 os.path.getsize(pages["this"]) / os.path.getsize(pages["baseline"]),
                 med[("this", "report page")] / med[("baseline", "report page")],
                 med[("this", "data alone")] / med[("baseline", "data alone")]))
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
