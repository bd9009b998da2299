#!/usr/bin/env python3
"""tune benchmarks (run on demand, never part of the test suite).

Each figure is printed as a ratio against a baseline measured in the same run:
  launch      N trials of `true` at concurrency 2: tune vs `xargs -P2` (and GNU parallel -j2 if installed)
  checkpoints registering a 1 GiB checkpoint (a rename) vs copying it; retention cost per
              checkpoint over 10,000 checkpoints of one trial, first 1,000 vs last 1,000
  results     one trial printing N small results as fast as `cat` can: results/s ingested by tune
              (result.json and progress.csv written), against the rate `cat` alone reaches into a file
  state       10,000 trials x 100 results: state write (steady state vs every trial serialized),
              load, resume start-up (as the driver logs it), driver peak RSS
  stall       the driver loop's longest stall while a trial hands over a 30,000-file checkpoint
              from tmpfs (copied off the loop), vs `cp -r` of the same tree (what the stall would be
              if the loop copied it)
  ssh         an SSH worker (scripts/test-hosts.sh): trial start, command to first output, a
              one-result trial's wall time, the driver's CPU while a remote trial prints 10
              lines/s for 20 s (vs the same trial run locally), syncs; --baseline-tune OLD runs
              them again with an older binary
  inspect     `tune ls` and `tune status` on a finished 5,000-trial state with 10 KB configs (time
              and peak RSS) vs reading the whole state (`ls` on the same state without its summary
              header, as written by an older tune; `checkpoints ls`, which loads the whole state as
              `status` did before it streamed)

  bench/bench.py [--launch-trials 1000] [--results 1000000] [--repeat 3] [--json out.json]
                 [--state-trials 10000] [--only state|ssh|inspect|launch|stall] [--baseline-tune BIN]

The launch figure is measured twice: with the experiment dir beside the bench's temp dir (the
disk), and on /dev/shm (tmpfs), since each trial creates a handful of files and file creation
costs differ by two orders of magnitude between filesystems.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNE = os.environ.get("TUNE_BIN", os.path.join(ROOT, "build", "tune"))


def timed(cmd, **kw):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.monotonic() - t0


def best_of(n, fn):
    runs = [fn() for _ in range(n)]
    return min(runs), statistics.median(runs)


def timed_rusage(cmd, stdin_bytes=None):
    """Runs `cmd`; returns (wall s, CPU s of it and every process it waited for: user + system).
    The CPU time is the steadier figure on a shared machine: other users' load stretches wall
    time, a process's own CPU time much less."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin_bytes is not None else subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if stdin_bytes is not None:
        p.stdin.write(stdin_bytes)
        p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    if status != 0:
        raise RuntimeError("%s exited with status %d" % (cmd[0], status))
    return wall, ru.ru_utime + ru.ru_stime


def bench_launch(tmp, trials, repeat, storage_root=None, tune=None, baseline_tune=None):
    """`tune` (default TUNE) runs `trials` trials of `true` at concurrency 2, against `xargs -P2`,
    GNU `parallel -j2` (if installed) and `baseline_tune` (if given), interleaved: each of the
    `repeat` rounds runs every contender once, in an order that rotates, so that all of them see
    the same load. Figures are medians (wall and CPU time), ratios are of medians. Storage dirs
    are deleted only after every run, so that no run pays for the inodes an earlier one freed
    (ext4 without a journal skips recently deleted inodes when it allocates, which would charge
    one run for another's rm)."""
    tune = tune or TUNE
    yaml = os.path.join(tmp, "launch.yaml")
    with open(yaml, "w") as f:
        f.write("name: launch\ntrial: {command: [\"true\"]}\n")
        f.write("param_space: {i: {grid_search: [%s]}}\n" % ", ".join(map(str, range(trials))))
        f.write("max_concurrent_trials: 2\nhosts: [{local: {cpus: 2}}]\n")
    made = []
    args = "\n".join(str(i) for i in range(trials)).encode()

    def run_tune(binary):
        storage = tempfile.mkdtemp(dir=storage_root or tmp)
        made.append(storage)
        return timed_rusage([binary, "run", yaml, "--quiet", "--storage-path", storage])

    contenders = [("xargs", lambda: timed_rusage(["xargs", "-P2", "-n1", "true"], args))]
    if shutil.which("parallel"):
        contenders.append(("parallel", lambda: timed_rusage(
            ["parallel", "-j2", "true", ":::"] + [str(i) for i in range(trials)])))
    contenders.append(("tune", lambda: run_tune(tune)))
    if baseline_tune:
        contenders.append(("baseline", lambda: run_tune(baseline_tune)))
    runs = {name: [] for name, _ in contenders}
    for r in range(repeat):
        k = r % len(contenders)
        for name, fn in contenders[k:] + contenders[:k]:
            runs[name].append(fn())
    out = {"trials": trials, "repeat": repeat}
    for name, got in runs.items():
        out[name + "_s"] = statistics.median(w for w, _ in got)
        out[name + "_best_s"] = min(w for w, _ in got)
        out[name + "_cpu_s"] = statistics.median(c for _, c in got)
        out[name + "_runs_s"] = [round(w, 3) for w, _ in got]
    for name in runs:
        if name == "xargs":
            continue
        out[name + "_over_xargs"] = out[name + "_s"] / out["xargs_s"]
        out[name + "_cpu_over_xargs"] = out[name + "_cpu_s"] / out["xargs_cpu_s"]
    if "parallel" in runs:
        out["tune_over_parallel"] = out["tune_s"] / out["parallel_s"]
        if baseline_tune:
            out["baseline_over_parallel"] = out["baseline_s"] / out["parallel_s"]
    # Files and dirs a trial leaves in its dir (its dir counted), from tune's last run.
    exp = os.path.join([d for d in made if os.path.isdir(os.path.join(d, "launch"))][-1], "launch")
    dirs = [d for d in os.listdir(exp) if d.startswith("trial_")]
    out["files_per_trial"] = 1 + sum(len(os.listdir(os.path.join(exp, d))) for d in dirs) / max(1, len(dirs))
    for d in made:
        shutil.rmtree(d, ignore_errors=True)
    return out


def bench_stall(tmp, files=30000, repeat=3):
    """The loop's longest stall while a trial hands over a checkpoint of `files` small files from
    tmpfs to the disk (copied off the loop), as tune.log reports it; baseline: `cp -r` of the
    same tree to the same disk, i.e. how long the loop would have stalled had it copied."""
    shm = tempfile.mkdtemp(prefix="tune-bench-stall-", dir="/dev/shm")
    try:
        src = os.path.join(shm, "tree")
        os.makedirs(src)
        for i in range(files):
            with open(os.path.join(src, "f%05d" % i), "w") as f:
                f.write("x" * 64)
        script = os.path.join(tmp, "stall.py")
        with open(script, "w") as f:
            f.write("import json, os, shutil, sys, time\n"
                    "if sys.argv[1] == '1':\n"
                    "    d = os.path.join(os.environ['TMPDIR'], 'ck')\n"
                    "    shutil.copytree(%r, d)\n"
                    "    print(json.dumps({'i': 1, 'checkpoint': d}), flush=True)\n"
                    "    sys.exit(0)\n"
                    "for i in range(1, 81):\n"
                    "    print(json.dumps({'i': i}), flush=True)\n"
                    "    time.sleep(0.05)\n" % src)
        yaml = os.path.join(tmp, "stall.yaml")
        with open(yaml, "w") as f:
            f.write("name: stall\ntrial: {command: [%s, %s, \"{x}\"]}\n"
                    "param_space: {x: {grid_search: [1, 2]}}\n" % (json.dumps(sys.executable), json.dumps(script)))
        stalls, copies = [], []
        for _ in range(repeat):
            storage = tempfile.mkdtemp(dir=tmp)
            run_tmp = tempfile.mkdtemp(dir=shm)
            env = dict(os.environ, TMPDIR=run_tmp)
            subprocess.run([TUNE, "run", yaml, "--quiet", "--storage-path", storage], check=True,
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(os.path.join(storage, "stall", "tune.log")) as f:
                import re
                stalls.append(float(re.findall(r"longest loop stall: (\d+) ms", f.read())[-1]) / 1000)
            dest = os.path.join(tempfile.mkdtemp(dir=tmp), "copy")
            t0 = time.monotonic()
            subprocess.run(["cp", "-r", src, dest], check=True)
            copies.append(time.monotonic() - t0)
        return {"files": files, "stall_s": statistics.median(stalls), "stall_max_s": max(stalls),
                "copy_s": statistics.median(copies)}
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def print_launch(label, launch):
    """One line per contender: median wall time and its ratio to xargs', median CPU time (all
    processes) and its ratio."""
    print("%s (median of %d, interleaved; target <= 1.5x xargs; %.1f files per trial)" % (
        label, launch["repeat"], launch["files_per_trial"]))
    for name in ("tune", "baseline", "xargs", "parallel"):
        if name + "_s" not in launch:
            continue
        ratio = "" if name == "xargs" else "%6.2fx   cpu %6.2fx" % (
            launch[name + "_over_xargs"], launch[name + "_cpu_over_xargs"])
        print("  %-10s wall %7.3fs  cpu %7.3fs  %s   runs %s" % (
            name, launch[name + "_s"], launch[name + "_cpu_s"], ratio,
            " ".join("%.2f" % w for w in launch[name + "_runs_s"])))
    if "tune_over_parallel" in launch:
        print("  tune / parallel: %.2fx (target <= 0.5x)" % launch["tune_over_parallel"])


def bench_results(tmp, n, repeat):
    data = os.path.join(tmp, "results.jsonl")
    with open(data, "w") as f:
        for i in range(n):
            f.write('{"loss": %.6f, "acc": %.6f, "step": %d}\n' % (1.0 / (i + 1), i / n, i))
    yaml = os.path.join(tmp, "results.yaml")
    with open(yaml, "w") as f:
        f.write("name: results\ntrial: {command: [\"cat\", \"%s\"]}\nparam_space: {x: 1}\n" % data)

    def run_tune():
        storage = tempfile.mkdtemp(dir=tmp)
        t = timed([TUNE, "run", yaml, "--quiet", "--storage-path", storage])
        state = json.load(open(os.path.join(storage, "results", "experiment_state.json")))
        assert state["trials"][0]["iteration"] == n, "not every result was ingested"
        shutil.rmtree(storage)
        return t

    def run_cat():
        with open(os.path.join(tmp, "cat.out"), "w") as out:
            t0 = time.monotonic()
            subprocess.run(["cat", data], stdout=out, check=True)
            return time.monotonic() - t0

    out = {"results": n}
    out["cat_s"], _ = best_of(repeat, run_cat)
    out["tune_s"], out["tune_median_s"] = best_of(repeat, run_tune)
    out["results_per_s"] = n / out["tune_s"]
    out["tune_over_cat"] = out["tune_s"] / out["cat_s"]
    return out


def bench_state(tmp, trials, results_each, storage_root):
    """State at scale: a real run of `trials` trials each reporting `results_each` results (the
    driver's peak RSS), then experiment_state.json load/write times, then resume start-up: of
    the finished experiment, and with 1,000 trials put back to RUNNING (ended while no driver
    ran: their output is read again and they are finished from it)."""
    bench_dir = os.path.join(os.path.dirname(TUNE), "bench")
    yaml = os.path.join(tmp, "scale.yaml")
    with open(yaml, "w") as f:
        f.write("name: scale\ntrial: {command: [\"%s\", \"%d\"]}\n"
                % (os.path.join(bench_dir, "tune_bench_reporter"), results_each))
        f.write("param_space: {lr: {loguniform: [1.0e-4, 1.0e-1]}, layers: {randint: [1, 8]}}\n")
        f.write("num_samples: %d\nseed: 1\nmetric: loss\nmode: min\n" % trials)
        f.write("max_concurrent_trials: 4\nhosts: [{local: {cpus: 4}}]\n")
    storage = tempfile.mkdtemp(dir=storage_root)
    out = {"trials": trials, "results_each": results_each}
    t0 = time.monotonic()
    p = subprocess.Popen([TUNE, "run", yaml, "--quiet", "--storage-path", storage],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    out["run_s"] = time.monotonic() - t0
    if status != 0:
        raise RuntimeError("the state-at-scale run failed")
    out["driver_max_rss_mb"] = usage.ru_maxrss / 1024.0
    exp = os.path.join(storage, "scale")
    out.update(json.loads(subprocess.run([os.path.join(bench_dir, "tune_bench_state"), exp],
                                         check=True, capture_output=True, text=True).stdout))
    # The same state on the disk under the bench's temp dir, where fsync really writes.
    disk = tempfile.mkdtemp(dir=tmp)
    shutil.copy(os.path.join(exp, "experiment_state.json"), disk)
    on_disk = json.loads(subprocess.run([os.path.join(bench_dir, "tune_bench_state"), disk],
                                        check=True, capture_output=True, text=True).stdout)
    out["disk_save_ms"] = on_disk["save_ms"]
    out["disk_save_durable_ms"] = on_disk["save_durable_ms"]
    shutil.rmtree(disk, ignore_errors=True)

    def resume():
        """(whole run, start-up: load + checks + re-attach scan, as the driver logs it)"""
        t0 = time.monotonic()
        subprocess.run([TUNE, "run", yaml, "--quiet", "--storage-path", storage, "--resume=auto"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        total = time.monotonic() - t0
        with open(os.path.join(exp, "tune.log")) as f:
            line = [l for l in f if "start-up took" in l][-1]
        return total, float(line.split("start-up took ")[1].split()[0])
    runs = [resume() for _ in range(3)]
    out["resume_finished_s"] = min(r[0] for r in runs)
    out["resume_startup_s"] = min(r[1] for r in runs)
    # 1,000 trials as a crashed driver would have left them: RUNNING, nothing read yet.
    with open(os.path.join(exp, "experiment_state.json")) as f:
        state = json.load(f)
    for t in state["trials"][:1000]:
        t.update(status="RUNNING", stdout_offset=0, iteration=0, metrics={}, last_result={})
    with open(os.path.join(exp, "experiment_state.json"), "w") as f:
        json.dump(state, f)
    out["resume_1000_ended_s"], out["resume_1000_startup_s"] = resume()
    shutil.rmtree(storage, ignore_errors=True)
    return out


def write_state(exp_dir, trials, config_bytes, counts=True):
    """A finished experiment_state.json as tune writes it: header line, one trial per line."""
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
                 "attempt": 1, "failures": 0, "host": "h", "error": "", "iteration": 100,
                 "time_total_s": 1.5, "last_result": {"loss": 0.5, "training_iteration": 100},
                 "metrics": {"loss": {"last": 0.5, "min": 0.4, "max": 0.9}},
                 "checkpoints": [{"seq": 1, "dir": "checkpoint_000001", "iteration": 100,
                                  "time_total_s": 1.5, "metrics": {"loss": 0.5}}],
                 "checkpoint_seq": 1, "stdout_offset": 10, "attempt_started": 1.0,
                 "restore_iteration": 0, "time_base": 0, "gpu_ids": []}
            f.write(json.dumps(t, separators=(",", ":")) + (",\n" if i + 1 < trials else "\n"))
        f.write("]}\n")


def time_and_rss(argv, env, repeat):
    """Best wall time and peak RSS (MB) of a command, each run in a fresh probe process."""
    probe = ("import resource, subprocess, sys, time\n"
             "t = time.monotonic()\n"
             "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
             "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", probe, *argv], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        runs.append((float(out[0]), int(out[1]) / 1024))
    return min(r[0] for r in runs), max(r[1] for r in runs)


def bench_inspect(tmp, trials=5000, config_bytes=10000, repeat=3):
    new, old = os.path.join(tmp, "new"), os.path.join(tmp, "old")
    write_state(os.path.join(new, "exp"), trials, config_bytes)
    write_state(os.path.join(old, "exp"), trials, config_bytes, counts=False)
    env = dict(os.environ, XDG_RUNTIME_DIR=tmp)
    r = {"trials": trials, "config_bytes": config_bytes,
         "state_mb": os.path.getsize(os.path.join(new, "exp", "experiment_state.json")) / 1e6}
    r["ls_s"], r["ls_mb"] = time_and_rss([TUNE, "ls", "--storage-path", new], env, repeat)
    r["ls_whole_s"], r["ls_whole_mb"] = time_and_rss([TUNE, "ls", "--storage-path", old], env, repeat)
    r["status_s"], r["status_mb"] = time_and_rss([TUNE, "status", os.path.join(new, "exp")], env, repeat)
    r["whole_s"], r["whole_mb"] = time_and_rss([TUNE, "checkpoints", "ls", os.path.join(new, "exp")], env,
                                               repeat)
    return r


def print_inspect(r):
    print("%-44s %11.3fs %10.3fs %9.3fx  (%.0f MB state; RSS %.1f MB vs %.1f MB)" % (
        "ls: %d trials x %d B configs vs whole parse" % (r["trials"], r["config_bytes"]), r["ls_s"],
        r["ls_whole_s"], r["ls_s"] / r["ls_whole_s"], r["state_mb"], r["ls_mb"], r["ls_whole_mb"]))
    print("%-44s %11.3fs %10.3fs %9.3fx  (RSS %.1f MB vs %.1f MB)" % (
        "status: streamed vs whole parse", r["status_s"], r["whole_s"], r["status_s"] / r["whole_s"],
        r["status_mb"], r["whole_mb"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch-trials", type=int, default=1000)
    ap.add_argument("--results", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures here as JSON")
    ap.add_argument("--state-trials", type=int, default=10000)
    ap.add_argument("--baseline-tune", help="launch, ssh: also run this (older) tune binary, for a ratio in the same run")
    ap.add_argument("--only", choices=["state", "ssh", "inspect", "launch", "stall"], help="run only this workload")
    a = ap.parse_args()
    if a.only == "inspect":
        tmp = tempfile.mkdtemp(prefix="tune-bench-")
        try:
            print_inspect(bench_inspect(tmp, repeat=a.repeat))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    if a.only == "stall":
        tmp = tempfile.mkdtemp(prefix="tune-bench-")
        try:
            r = bench_stall(tmp, repeat=a.repeat)
            print("%-44s %11.3fs %11.3fs %9.3fx  (median of %d; max stall %.3f s; target <= 0.2 s)" % (
                "stall: %d-file checkpoint, tmpfs -> disk" % r["files"], r["stall_s"], r["copy_s"],
                r["stall_s"] / r["copy_s"], a.repeat, r["stall_max_s"]))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    if a.only == "launch":
        tmp = tempfile.mkdtemp(prefix="tune-bench-")
        n = a.launch_trials
        try:
            got = {"disk": bench_launch(tmp, n, a.repeat, baseline_tune=a.baseline_tune)}
            print_launch("launch: %d x true, -P2 (experiment on the disk)" % n, got["disk"])
            if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
                shm = tempfile.mkdtemp(prefix="tune-bench-", dir="/dev/shm")
                try:
                    got["tmpfs"] = bench_launch(tmp, n, a.repeat, storage_root=shm, baseline_tune=a.baseline_tune)
                    print_launch("launch: as above, experiment on /dev/shm", got["tmpfs"])
                finally:
                    shutil.rmtree(shm, ignore_errors=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"launch": got, "baseline_tune": a.baseline_tune, "machine": os.uname().nodename,
                               "cpus": os.cpu_count(), "load": os.getloadavg()}, f, indent=2)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    if a.only == "ssh":
        tmp = tempfile.mkdtemp(prefix="tune-bench-")
        try:
            print_ssh(bench_ssh(tmp))
            if a.baseline_tune:
                print("the same with %s:" % a.baseline_tune)
                print_ssh(bench_ssh(tempfile.mkdtemp(dir=tmp), tune=a.baseline_tune))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    if a.only == "state":
        tmp = tempfile.mkdtemp(prefix="tune-bench-")
        try:
            print_state(bench_state(tmp, a.state_trials, 100, shm_or(tmp)))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp = tempfile.mkdtemp(prefix="tune-bench-")
    try:
        launch = bench_launch(tmp, a.launch_trials, a.repeat)
        shm = None
        if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
            shm = tempfile.mkdtemp(prefix="tune-bench-", dir="/dev/shm")
            try:
                launch_shm = bench_launch(tmp, a.launch_trials, a.repeat, storage_root=shm)
            finally:
                shutil.rmtree(shm, ignore_errors=True)
        results = bench_results(tmp, a.results, a.repeat)
        ckpt_bin = os.path.join(os.path.dirname(TUNE), "bench", "tune_bench_checkpoints")
        ckpt = json.loads(subprocess.run([ckpt_bin, os.path.join(tmp, "ckpt")], check=True,
                                         capture_output=True, text=True).stdout)
        state = bench_state(tmp, a.state_trials, 100, shm_or(tmp))
        inspect = bench_inspect(tmp, repeat=a.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%-44s %12s %12s %10s" % ("workload", "tune", "baseline", "ratio"))
    print("%-44s %11.3fs %11.3fs %9.2fx  (target <= 1.5x)" % (
        "launch: %d x true, concurrency 2 vs xargs -P2" % launch["trials"], launch["tune_s"], launch["xargs_s"],
        launch["tune_over_xargs"]))
    if shm:
        print("%-44s %11.3fs %11.3fs %9.2fx  (same, experiment dir on tmpfs)" % (
            "launch: as above, storage on /dev/shm", launch_shm["tune_s"], launch_shm["xargs_s"],
            launch_shm["tune_over_xargs"]))
    if "parallel_s" in launch:
        print("%-44s %11.3fs %11.3fs %9.2fx  (target <= 0.5x)" % (
            "launch: vs GNU parallel -j2", launch["tune_s"], launch["parallel_s"], launch["tune_over_parallel"]))
    print("%-44s %11.3fs %11.3fs %9.2fx  -> %.0f results/s (target >= 100000/s)" % (
        "results: %d lines ingested vs cat to a file" % results["results"], results["tune_s"], results["cat_s"],
        results["tune_over_cat"], results["results_per_s"]))
    print("%-44s %11.3fms %10.0fms %9.5fx  (target < 10 ms)" % (
        "checkpoint: register 1 GiB (rename) vs copy", ckpt["adopt_1gib_ms"], ckpt["copy_1gib_ms"],
        ckpt["adopt_1gib_ms"] / ckpt["copy_1gib_ms"]))
    print("%-44s %11.3fus %10.3fus %9.2fx  (flat = independent of n)" % (
        "retention: last 1000 of 10000 vs first 1000", ckpt["retention_last_1000_us_each"],
        ckpt["retention_first_1000_us_each"],
        ckpt["retention_last_1000_us_each"] / ckpt["retention_first_1000_us_each"]))
    print_state(state)
    print_inspect(inspect)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"state": state, "inspect": inspect, "checkpoints": ckpt, "launch": launch, "launch_tmpfs": launch_shm if shm else None, "results": results, "machine": os.uname().nodename,
                       "cpus": os.cpu_count()}, f, indent=2)


def ssh_timings(line):
    """The figures of the driver's "ssh timings: ..." log line, by name."""
    def num(pattern):
        m = re.search(pattern, line)
        return float(m.group(1)) if m else float("nan")
    return {"starts": num(r"(\d+) starts,"), "start_ms": num(r"starts, median ([\d.]+) ms"),
            "first_output_ms": num(r"first output read ([\d.]+) ms"),
            "syncs": num(r"(\d+) syncs,"), "sync_ms": num(r"syncs, median ([\d.]+) ms"),
            "longest_ms": num(r"(?:one loop turn|one poll of a host) ([\d.]+) ms"),
            "published": num(r"(\d+) checkpoints published"),
            "bytes_moved": num(r"published, (\d+) bytes"),
            "publish_ms": num(r"bytes, median ([\d.]+) ms"),
            "looks": num(r"(\d+) looks at trials' output")}


def host_side_cpu_s(hosts_dir):
    """CPU seconds of a test host's ended sessions: its sshd reaps each connection's process,
    which reaped what ran in it (SFTP, the shell, tune-agent and the supervisors it reaped)."""
    with open(os.path.join(hosts_dir, "w1", "sshd.pid")) as f:
        pid = f.read().strip()
    with open("/proc/%s/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[13]) + int(rest[14])) / os.sysconf("SC_CLK_TCK")


def bench_ssh(tmp, trials=200, tune=TUNE):
    """SSH worker host (scripts/test-hosts.sh; needs root for its network namespace): trial start
    over the open connection, a periodic sync of an unchanged trial dir, and the longest time one
    poll of a host spent on sync bookkeeping (on the host's thread), as the driver logs them
    ("ssh timings: ..."). Baselines: `ssh -S <master> host true` and an rsync of an unchanged dir
    over the same kind of master."""
    hosts_dir = os.path.join(tmp, "hosts")
    script = os.path.join(ROOT, "scripts", "test-hosts.sh")
    subprocess.run([script, "up", hosts_dir, "1"], check=True, stdout=subprocess.DEVNULL)
    try:
        with open(os.path.join(hosts_dir, "hosts.json")) as f:
            hj = json.load(f)
        h = hj["hosts"][0]
        host_line = ("hosts:\n  - ssh: {host: %s, port: %d, user: %s, identity_file: %s, "
                     "known_hosts_file: %s, storage_path: %s, cpus: %%d}\n"
                     % (h["host"], h["port"], hj["user"], hj["identity_file"], hj["known_hosts"],
                        h["storage_path"]))

        def run(name, body, cpus):
            yaml = os.path.join(tmp, name + ".yaml")
            with open(yaml, "w") as f:
                f.write("name: %s\n%s" % (name, body) + host_line % cpus)
            storage = os.path.join(tmp, "ssh-" + name)
            wall, cpu = timed_rusage([tune, "run", yaml, "--quiet", "--storage-path", storage])
            with open(os.path.join(storage, name, "tune.log")) as f:
                t = ssh_timings([l for l in f if "ssh timings:" in l][-1])
            t["wall_s"], t["cpu_s"] = wall, cpu
            return t

        def run_local(name, body):
            yaml = os.path.join(tmp, name + ".yaml")
            with open(yaml, "w") as f:
                f.write("name: %s\n%s" % (name, body))
            return timed_rusage([tune, "run", yaml, "--quiet", "--storage-path",
                                 os.path.join(tmp, "local-" + name)])[1]

        starts = run("starts", "trial: {command: [\"true\"]}\nparam_space: {i: {grid_search: [%s]}}\n"
                     "sync_config: {syncer: none}\n" % ", ".join(map(str, range(trials))), 1)
        # A trial that prints one result at once and exits: command to first output read.
        one = os.path.join(tmp, "one_result.sh")  # (a command's braces would be placeholders)
        with open(one, "w") as f:
            f.write("echo '{\"x\": 1}'\n")
        firsts = run("firsts", "trial: {command: [sh, %s]}\n" % json.dumps(one) +
                     "param_space: {i: {grid_search: [%s]}}\nsync_config: {syncer: none}\n"
                     % ", ".join(map(str, range(50))), 1)
        # A trial printing 10 lines a second for 20 s: the driver's CPU time (each poll of the
        # host is a few SFTP round trips), against the same trial run locally, in the same run.
        printer = os.path.join(tmp, "printer.sh")
        with open(printer, "w") as f:
            f.write('i=0; while [ $i -lt 200 ]; do echo "{\\"i\\": $i}"; i=$((i+1)); sleep 0.1; done\n')
        printer_body = ("trial: {command: [sh, %s]}\nparam_space: {i: 1}\nsync_config: {syncer: none}\n"
                        % json.dumps(printer))
        printing = run("printing", printer_body, 1)
        printing_local_cpu = run_local("printing_local", printer_body)
        # 8 trials that print nothing for 20 s: what watching them costs, the driver's CPU and
        # the host's (its sshd answering the driver's looks, the agent).
        quiet_body = ("trial: {command: [sleep, \"20\"]}\nparam_space: {i: {grid_search: [%s]}}\n"
                      "sync_config: {syncer: none}\n" % ", ".join(map(str, range(8))))
        host0 = host_side_cpu_s(hosts_dir)
        quiet = run("quiet", quiet_body, 8)
        time.sleep(1)  # (the connection's end reaped)
        quiet_host = host_side_cpu_s(hosts_dir) - host0
        syncs = run("syncs", "trial: {command: [\"sleep\", \"4\"]}\nparam_space: {i: {grid_search: [1, 2]}}\n"
                    "sync_config: {sync_period: 0.2}\n", 2)
        # Baselines over an OpenSSH master of our own.
        sock = os.path.join(tmp, "cm")
        base = ["ssh", "-o", "ControlPath=" + sock, "-o", "BatchMode=yes", "-o",
                "UserKnownHostsFile=" + hj["known_hosts"], "-i", hj["identity_file"], "-p",
                str(h["port"]), "-l", hj["user"], h["host"]]
        master = subprocess.Popen(base[:1] + ["-M", "-N"] + base[1:], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        ssh_true = []
        for _ in range(50):
            t0 = time.monotonic()
            subprocess.run(base + ["true"], check=True)
            ssh_true.append((time.monotonic() - t0) * 1000)
        rs = []
        src = "%s@%s:%s/syncs/" % (hj["user"], h["host"], h["storage_path"])
        dst = os.path.join(tmp, "rsync-baseline")
        for _ in range(20):
            t0 = time.monotonic()
            subprocess.run(["rsync", "-rlt", "-e", "ssh -o ControlPath=%s -p %d" % (sock, h["port"]),
                            src, dst], check=True, stdout=subprocess.DEVNULL)
            rs.append((time.monotonic() - t0) * 1000)
        master.terminate()
        master.wait()
        return {"trials": trials, "start_ms": starts["start_ms"],
                "ssh_true_ms": statistics.median(ssh_true),
                "first_output_ms": firsts["first_output_ms"],
                "one_result_trial_ms": firsts["wall_s"] * 1000 / 50,
                "printing_cpu_s": printing["cpu_s"], "printing_local_cpu_s": printing_local_cpu,
                "quiet_cpu_s": quiet["cpu_s"], "quiet_host_s": quiet_host,
                "quiet_wall_s": quiet["wall_s"], "quiet_looks": quiet["looks"],
                "syncs": syncs["syncs"], "sync_ms": syncs["sync_ms"],
                "rsync_ms": statistics.median(rs[1:]),
                "sync_bookkeeping_max_ms": syncs["longest_ms"], "mode": hj["mode"]}
    finally:
        subprocess.run([script, "down", hosts_dir], stdout=subprocess.DEVNULL)


def print_ssh(r):
    print("%-44s %11.2fms %10.2fms %9.2fx  (target <= 20 ms; %s hosts)" % (
        "ssh: start a trial, median of %d" % r["trials"], r["start_ms"], r["ssh_true_ms"],
        r["start_ms"] / r["ssh_true_ms"], r["mode"]))
    print("%-44s %11.2fms %10.2fms %9.2fx  (target <= 20 ms; baseline: ssh true)" % (
        "ssh: command to first output read, median", r["first_output_ms"], r["ssh_true_ms"],
        r["first_output_ms"] / r["ssh_true_ms"]))
    print("%-44s %11.2fms %10.2fms %9.2fx  (one at a time: start, output, exit)" % (
        "ssh: wall time per one-result trial, of 50", r["one_result_trial_ms"], r["ssh_true_ms"],
        r["one_result_trial_ms"] / r["ssh_true_ms"]))
    print("%-44s %12.2fs %11.2fs %9.2fx  (driver CPU; baseline: the same trial run locally)" % (
        "ssh: a trial printing 10 lines/s for 20 s", r["printing_cpu_s"], r["printing_local_cpu_s"],
        r["printing_cpu_s"] / r["printing_local_cpu_s"]))
    if "quiet_cpu_s" in r:
        print("%-44s %12.2fs %11.2fs %10s  (driver CPU, the host's sshd + agent; %.1f s; %.0f looks)" % (
            "ssh: 8 trials printing nothing for 20 s", r["quiet_cpu_s"], r["quiet_host_s"], "",
            r["quiet_wall_s"], r["quiet_looks"]))
    print("%-44s %11.2fms %10.2fms %9.2fx  (target <= 50 ms; baseline: rsync by hand)" % (
        "ssh: periodic sync of an unchanged trial dir", r["sync_ms"], r["rsync_ms"],
        r["sync_ms"] / r["rsync_ms"]))
    print("%-44s %11.2fms %11s %10s  (target <= 10 ms)" % (
        "ssh: longest sync bookkeeping in one poll of a host", r["sync_bookkeeping_max_ms"], "", ""))


def shm_or(tmp):
    """/dev/shm when writable (file creation there costs microseconds, not this VM's 650 us)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tmp


def print_state(st):
    n = st["trials"]
    print("%-44s %11.1fms %10.1fms %9.2fx  (target <= 50 ms; %.1f MB; fsync'ed: %.1f ms)" % (
        "state: write, %d trials (%d changed) vs all" % (n, st["serialized_per_write"]),
        st["save_ms"], st["save_cold_ms"], st["save_ms"] / st["save_cold_ms"],
        st["state_bytes"] / 1e6, st["save_durable_ms"]))
    print("%-44s %11.1fms %11s %10s  (target <= 50 ms; fsync'ed: %.1f ms)" % (
        "state: the same write, state file on disk",
        st["disk_save_ms"], "", "", st["disk_save_durable_ms"]))
    print("%-44s %11.1fms" % ("state: load it (parse + validate)", st["load_ms"]))
    print("%-44s %11.3fs %11s %10s  (target <= 1 s; whole run %.3f s)" % (
        "resume start-up, %d trials, all done" % n, st["resume_startup_s"], "", "",
        st["resume_finished_s"]))
    print("%-44s %11.3fs %11s %10s  (target <= 1 s; whole run %.3f s: 1,000 x %d results read)" % (
        "resume start-up, 1,000 ended while no driver", st["resume_1000_startup_s"], "", "",
        st["resume_1000_ended_s"], st["results_each"]))
    print("%-44s %10.1fMB %11s %10s  (target <= 100 MB; the run took %.1f s)" % (
        "driver peak RSS: %d trials x %d results" % (n, st["results_each"]),
        st["driver_max_rss_mb"], "", "", st["run_s"]))


if __name__ == "__main__":
    main()
