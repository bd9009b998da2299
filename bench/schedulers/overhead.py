#!/usr/bin/env python3
"""Scheduler overhead, on demand (never run by ctest; results in docs/BENCHMARKS.md).

1. Decision time: build/bench/tune_bench_sched_overhead simulates TRIALS trials x RESULTS results
   (synthetic seeded curves, 16 running at a time) through each scheduler and prints the time per
   on_result call. Goal: <= 50 us per decision at 10,000 x 100.
2. Driver CPU: `tune run` of TRIALS real trials (build/bench/tune_bench_reporter printing RESULTS
   precomputed values), fifo against asha and median stopping, in the same run. Every trial
   prints the same curve, so no scheduler stops one (a tie never stops a trial) and all three
   runs process the same results: the difference is what deciding costs the driver. The driver's
   own user+system CPU is read from /proc/<pid>/stat while it runs (its trials and agent are
   other processes). Goal: <= 1.1 x fifo's driver CPU.

    bench/schedulers/overhead.py [--trials 10000] [--results 100] [--repeat 1]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build")
TUNE = os.path.join(BUILD, "tune")
REPORTER = os.path.join(BUILD, "bench", "tune_bench_reporter")
SIM = os.path.join(BUILD, "bench", "tune_bench_sched_overhead")
TICK = os.sysconf("SC_CLK_TCK")

SCHEDULERS = {
    "fifo": None,
    "asha": "{type: asha, max_t: %d, grace_period: 1, reduction_factor: 4}",
    "median_stopping": "{type: median_stopping, grace_period: 5, min_samples_required: 3}",
}


def cpu_of(pid):
    """user + system seconds of process `pid` itself (all its threads), or None once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def run_driver(tmp, name, scheduler, trials, results):
    yaml = os.path.join(tmp, name + ".yaml")
    with open(yaml, "w") as f:
        f.write("name: %s\n" % name)
        f.write('trial: {command: ["%s", "%d", "0", "0", "1", "0.5"]}\n' % (REPORTER, results))
        f.write("param_space: {a: {uniform: [0, 1]}, b: {uniform: [0, 0.5]}}\n")
        f.write("num_samples: %d\nseed: 7\nmetric: score\nmode: max\n" % trials)
        f.write("max_concurrent_trials: 2\nhosts: [{local: {cpus: 2}}]\n")
        if scheduler:
            f.write("scheduler: %s\n" % (scheduler % results if "%d" in scheduler else scheduler))
    storage = tempfile.mkdtemp(dir=tmp)
    t0 = time.monotonic()
    p = subprocess.Popen([TUNE, "run", yaml, "--quiet", "--storage-path", storage],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu = 0.0
    while p.poll() is None:
        c = cpu_of(p.pid)
        if c is not None:
            cpu = c
        time.sleep(0.05)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("%s: tune run exited %d (storage kept in %s)" % (name, p.returncode, storage))
    exp = os.path.join(storage, name)
    rows = 0
    for d in os.listdir(exp):
        if d.startswith("trial_"):
            with open(os.path.join(exp, d, "result.json"), "rb") as f:
                rows += sum(1 for _ in f)
    shutil.rmtree(storage, ignore_errors=True)
    return {"scheduler": name, "trials": trials, "results": rows, "wall_s": round(wall, 2),
            "driver_cpu_s": round(cpu, 2),
            "driver_cpu_us_per_result": round(cpu * 1e6 / max(rows, 1), 1),
            "driver_cpu_ms_per_trial": round(cpu * 1e3 / trials, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--results", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", help="also write the figures to this JSON file")
    ap.add_argument("--skip-driver", action="store_true", help="only the decision-time simulation")
    a = ap.parse_args()
    for exe in (TUNE, REPORTER, SIM):
        if not os.path.exists(exe):
            sys.exit("%s is missing: build first (cmake --build build)" % exe)
    out = {"decision": [], "driver": []}
    sim = subprocess.run([SIM, str(a.trials), str(a.results), "16", "1"], check=True,
                         capture_output=True, text=True).stdout
    for line in sim.splitlines():
        r = json.loads(line)
        out["decision"].append(r)
        print("decision  %-16s %8d decisions  %7.2f us each (worst %.0f us)" %
              (r["scheduler"], r["decisions"], r["us_per_decision"], r["worst_us"]), flush=True)
    if not a.skip_driver:
        tmp = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        try:
            for _ in range(a.repeat):
                for name, sched in SCHEDULERS.items():
                    r = run_driver(tmp, name, sched, a.trials, a.results)
                    out["driver"].append(r)
                    print("driver    %-16s %8d results  %6.2f s CPU  %6.1f us/result  %.3f ms/trial"
                          "  (%.1f s wall)" % (name, r["results"], r["driver_cpu_s"],
                                               r["driver_cpu_us_per_result"],
                                               r["driver_cpu_ms_per_trial"], r["wall_s"]),
                          flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        fifo = [r for r in out["driver"] if r["scheduler"] == "fifo"]
        for name in SCHEDULERS:
            if name == "fifo":
                continue
            mine = [r for r in out["driver"] if r["scheduler"] == name]
            ratio = sum(r["driver_cpu_s"] for r in mine) / sum(r["driver_cpu_s"] for r in fifo)
            same = all(r["results"] == fifo[0]["results"] for r in mine)
            print("ratio     %-16s driver CPU / fifo's = %.3f%s" %
                  (name, ratio, "" if same else "  (NOT the same results processed)"))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
