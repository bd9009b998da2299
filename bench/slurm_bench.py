#!/usr/bin/env python3
"""Slurm bench (run on demand, never part of the test suite; needs root and slurm-wlm + munge).

Brings up the one-machine test cluster (scripts/test-slurm.sh) and measures:
  wall     N trials of `sleep 1` through tune with `max_jobs: 16`, against the same N sleeps as
           one plain `sbatch --array=0-(N-1)%16` job array (submitted and waited for)
  calls    Slurm commands tune ran (sbatch, squeue, scancel), in total and per minute, from shims
           on PATH that log each call

  bench/slurm_bench.py [--trials 500] [--max-jobs 16] [--poll 2] [--json out.json]

On a machine with C CPUs the cluster's one node runs C jobs at once, so both sides take about
N / C seconds plus their overheads; the ratio is what the figure is about.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNE = os.environ.get("TUNE_BIN", os.path.join(ROOT, "build", "tune"))
SCRIPT = os.path.join(ROOT, "scripts", "test-slurm.sh")


def shims(bindir, log):
    os.makedirs(bindir, exist_ok=True)
    for cmd in ("sbatch", "squeue", "scancel"):
        path = os.path.join(bindir, cmd)
        real = shutil.which(cmd)
        with open(path, "w") as f:
            f.write('#!/bin/sh\necho "$(date +%%s.%%N) %s" >> %s\nexec %s "$@"\n' % (cmd, log, real))
        os.chmod(path, 0o755)


def wait_empty(env, name):
    while True:
        out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], env=env,
                             capture_output=True, text=True).stdout
        if not out.strip():
            return
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--max-jobs", type=int, default=16)
    ap.add_argument("--poll", type=float, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tune-slurm-bench-")
    cluster = os.path.join(work, "cluster")
    subprocess.run([SCRIPT, "up", cluster], check=True, capture_output=True)
    try:
        env = dict(os.environ, SLURM_CONF=os.path.join(cluster, "slurm.conf"),
                   TUNE_SLURM_POLL_S=str(a.poll))
        log = os.path.join(work, "calls.log")
        shims(os.path.join(work, "bin"), log)
        env["PATH"] = os.path.join(work, "bin") + ":" + env["PATH"]
        trial = os.path.join(work, "trial.sh")
        with open(trial, "w") as f:
            f.write('#!/bin/sh\nsleep 1\necho \'{"x": 1}\'\n')
        os.chmod(trial, 0o755)
        with open(os.path.join(work, "exp.yaml"), "w") as f:
            f.write(f"""name: bench
storage_path: {work}/results
trial:
  command: ["{trial}"]
param_space:
  i: {{grid_search: {list(range(a.trials))}}}
tensorboard: false
report_period_s: 0
hosts:
  - slurm: {{partition: tune, max_jobs: {a.max_jobs}}}
""")
        t0 = time.time()
        p = subprocess.run([TUNE, "run", "--quiet", os.path.join(work, "exp.yaml")], env=env,
                           capture_output=True, text=True)
        tune_wall = time.time() - t0
        if p.returncode != 0:
            sys.exit("tune failed:\n" + p.stderr[-2000:])
        with open(log) as f:
            calls = [line.split()[1] for line in f]
        counts = {c: calls.count(c) for c in ("sbatch", "squeue", "scancel")}
        # The baseline: the same sleeps as one job array, at most max_jobs at once.
        t0 = time.time()
        subprocess.run(["sbatch", "--parsable", "-J", "bench-array", "-p", "tune",
                        "-o", "/dev/null", "--array=0-%d%%%d" % (a.trials - 1, a.max_jobs),
                        "--wrap", "sleep 1"], env=env, check=True, capture_output=True)
        wait_empty(env, "bench-array")
        array_wall = time.time() - t0
        res = {
            "trials": a.trials, "max_jobs": a.max_jobs, "poll_s": a.poll,
            "tune_wall_s": round(tune_wall, 2), "array_wall_s": round(array_wall, 2),
            "ratio": round(tune_wall / array_wall, 3),
            "slurm_calls": counts,
            "slurm_calls_per_min": round(sum(counts.values()) / (tune_wall / 60), 1),
            "squeue_per_min": round(counts["squeue"] / (tune_wall / 60), 1),
        }
        print(json.dumps(res, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        subprocess.run([SCRIPT, "down", cluster], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
