#!/usr/bin/env python3
"""tune against its peers and against the physical limit (issue 6). Run on demand:

  scripts/setup.sh --bench && python3 bench/peers.py [--config bench/peers.json] [--json out.json]
                                                     [--only NAME ...] [--baseline-tune BIN]
                                                     [--repeat N]

Six workloads, parameters in bench/peers.json (scaled to a 2-core machine), each printed with a
baseline measured in the same run and the ratio:
  overhead     Ray Tune's bookkeeping release test, scaled: N trials that sleep 1 s and report
               once, at concurrency 32: wall time vs the ideal N x 1 s / 32
  launch       N trials of `true` at concurrency 2: tune vs `xargs -P2` vs GNU `parallel -j2`
  throughput   32 trials reporting at rising rates for D s, until the driver falls behind; plus
               one trial printing results flat out (`cat` of a file)
  state        10,000 trials x 100 results: state write, resume start-up, driver RSS
  checkpoints  16 trials writing a 10 MB checkpoint every 2 s, keep 2, on SSH worker hosts with
               rsync: bytes received over the workers' links and bytes of checkpoints published
               vs bytes retained, sync latency, overhead vs `syncer: none`; --baseline-tune
               runs another build (e.g. main's) interleaved with this one, --repeat N times
  optuna       Optuna 3.1 (Debian's python3-optuna) running the same subprocess objective,
               200 trials of a 50 ms process, n_jobs=2, vs tune at concurrency 2
The SSH workload needs root (it makes worker hosts in network namespaces); without it, it is
reported as skipped.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (launch, results, state workloads)

ROOT = bench.ROOT
TUNE = bench.TUNE
BENCH_BIN = os.path.join(os.path.dirname(TUNE), "bench")
REPORTER = os.path.join(BENCH_BIN, "tune_bench_reporter")
SYSTEM_PY = "/usr/bin/python3"  # Debian's, with python3-optuna


def run_tune(yaml, storage, *extra):
    t0 = time.monotonic()
    subprocess.run([TUNE, "run", yaml, "--quiet", "--storage-path", storage, *extra], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def write(path, text):
    with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())
    return path


def overhead(tmp, c):
    yaml = write(os.path.join(tmp, "overhead.yaml"), f"""
        name: overhead
        trial: {{command: ["{REPORTER}", "1", "{c['sleep_s']}"]}}
        param_space: {{x: {{uniform: [0, 1]}}}}
        num_samples: {c['trials']}
        seed: 1
        max_concurrent_trials: {c['concurrency']}
        hosts: [{{local: {{cpus: {c['concurrency']}}}}}]
        """)
    wall = run_tune(yaml, tempfile.mkdtemp(dir=tmp))
    ideal = c["trials"] * c["sleep_s"] / c["concurrency"]
    return {"wall_s": wall, "ideal_s": ideal, "overhead_pct": (wall / ideal - 1) * 100,
            "ray_published_pct": (715 / 625 - 1) * 100}


def launch(tmp, c):
    out = bench.bench_launch(tmp, c["trials"], 1)
    # The same with the experiment dir on tmpfs: what file creation on the disk costs.
    shm = bench.shm_or(tmp)
    if shm != tmp:
        d = tempfile.mkdtemp(prefix="tune-peers-", dir=shm)
        try:
            out["tmpfs"] = bench.bench_launch(tmp, c["trials"], 1, storage_root=d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return out


def throughput(tmp, c):
    out = {"levels": []}
    for rate in c["rates_per_trial"]:
        n = int(rate * c["duration_s"])
        yaml = write(os.path.join(tmp, "tp%d.yaml" % rate), f"""
            name: tp
            trial: {{command: ["{REPORTER}", "{n}", "0", "{rate}"]}}
            param_space: {{x: {{uniform: [0, 1]}}}}
            num_samples: {c['trials']}
            max_concurrent_trials: {c['trials']}
            hosts: [{{local: {{cpus: {c['trials']}}}}}]
            """)
        storage = tempfile.mkdtemp(dir=tmp)
        wall = run_tune(yaml, storage)
        with open(os.path.join(storage, "tp", "experiment_state.json")) as f:
            got = sum(t["iteration"] for t in json.load(f)["trials"])
        total = n * c["trials"]
        # Kept up: every result recorded, and the run no more than 10% longer than the trials.
        kept_up = got == total and wall <= c["duration_s"] * 1.1 + 1
        out["levels"].append({"rate_per_trial": rate, "offered_per_s": rate * c["trials"],
                              "wall_s": wall, "recorded": got, "kept_up": kept_up})
        shutil.rmtree(storage, ignore_errors=True)
        if not kept_up:
            break
    ok = [l for l in out["levels"] if l["kept_up"]]
    out["sustained_per_s"] = max((l["offered_per_s"] for l in ok), default=0)
    out["flat_out"] = bench.bench_results(tmp, c["flat_out_results"], 1)
    return out


def state(tmp, c):
    return bench.bench_state(tmp, c["trials"], c["results_each"], bench.shm_or(tmp))


CKPT_TRIAL = """
import os, tempfile, time, tune_trial
cfg = tune_trial.config()
size = int(cfg["mb"]) << 20
start = time.time()
i = 0
while time.time() - start < float(cfg["duration"]):
    time.sleep(float(cfg["every"]))
    i += 1
    d = tempfile.mkdtemp(dir=os.environ["TUNE_TRIAL_DIR"])
    with open(os.path.join(d, "weights.bin"), "wb") as f:
        f.write(os.urandom(1 << 20) * (size >> 20))
    tune_trial.report({"i": i}, checkpoint_dir=d)
"""


def wire_rx(hj):
    """Bytes the head has received from the worker hosts so far (their veth links, netns mode;
    None in loopback mode): everything that crossed the link, ssh framing included."""
    if hj["mode"] != "netns":
        return None
    total = 0
    for k in range(1, len(hj["hosts"]) + 1):
        with open(os.path.join(hj["_dir"], "w%d" % k, "veth")) as f:
            veth = f.read().strip()
        with open("/sys/class/net/%s/statistics/rx_bytes" % veth) as f:
            total += int(f.read())
    return total


def retained_on_head(exp_dir):
    """Bytes of the checkpoint dirs the head holds at the end (what retention kept)."""
    total = 0
    for root, dirs, files in os.walk(exp_dir):
        if "/checkpoint_" in root + "/":
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def checkpoints_run(tmp, c, hj, host_lines, trial, syncer, tune):
    # (in a dir of its own: it is the trials' workdir, which sync_workdir copies to the hosts,
    # and `tmp` also holds the workers' storage)
    os.makedirs(os.path.join(tmp, "exp"), exist_ok=True)
    yaml = os.path.join(tmp, "exp", "ckpt-%s.yaml" % syncer)
    with open(yaml, "w") as f:
        f.write(textwrap.dedent(f"""
            name: ckpt-{syncer}
            trial: {{command: ["{SYSTEM_PY}", "{trial}"]}}
            param_space: {{mb: {c['checkpoint_mb']}, every: {c['every_s']}, duration: {c['duration_s']}}}
            num_samples: {c['trials']}
            checkpoint_config: {{num_to_keep: {c['keep']}}}
            sync_config: {{syncer: {syncer}, sync_period: 10}}
            hosts:
            """).lstrip() + host_lines)
    storage = tempfile.mkdtemp(dir=tmp)
    rx0 = wire_rx(hj)
    t0 = time.monotonic()
    subprocess.run([tune, "run", yaml, "--quiet", "--storage-path", storage], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    rx1 = wire_rx(hj)
    exp_dir = os.path.join(storage, "ckpt-" + syncer)
    with open(os.path.join(exp_dir, "tune.log")) as f:
        t = bench.ssh_timings([l for l in f if "ssh timings:" in l][-1])
    out = {"wall_s": wall, "published": t["published"], "bytes_moved": t["bytes_moved"],
           "publish_ms": t["publish_ms"], "wire_rx": None if rx0 is None else rx1 - rx0,
           "retained_on_head": retained_on_head(exp_dir)}
    # The workers' storage as the head sees it (netns mode: a bind mount inside each worker's
    # namespace of STATE_DIR/wK/root)
    workers = [os.path.join(hj["_dir"], "w%d" % k, "root", "ckpt-" + syncer)
               for k in range(1, len(hj["hosts"]) + 1)]
    if syncer == "none":  # no copies: what the workers keep is what is retained
        out["retained_on_head"] = sum(retained_on_head(w) for w in workers)
    if os.environ.get("PEERS_KEEP_LOG"):  # (analysis: the driver's log of each run)
        shutil.copy(os.path.join(exp_dir, "tune.log"), "%s-%s-%d.log" % (
            os.environ["PEERS_KEEP_LOG"], syncer, int(time.time())))
    shutil.rmtree(storage, ignore_errors=True)
    for w in workers:  # so that the next run starts from nothing
        shutil.rmtree(w, ignore_errors=True)
    return out


def checkpoints(tmp, c, baseline_tune=None):
    if os.geteuid() != 0:
        return {"skipped": "needs root for worker hosts in network namespaces"}
    hosts_dir = os.path.join(tmp, "hosts")
    script = os.path.join(ROOT, "scripts", "test-hosts.sh")
    subprocess.run([script, "up", hosts_dir, str(c["workers"])], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        with open(os.path.join(hosts_dir, "hosts.json")) as f:
            hj = json.load(f)
        hj["_dir"] = hosts_dir
        trial = write(os.path.join(tmp, "ckpt_trial.py"), CKPT_TRIAL)
        per_host = -(-c["trials"] // c["workers"])
        host_lines = "".join(
            "  - ssh: {host: %s, port: %d, user: %s, identity_file: %s, known_hosts_file: %s, "
            "storage_path: %s, cpus: %d}\n" % (h["host"], h["port"], hj["user"], hj["identity_file"],
                                               hj["known_hosts"], h["storage_path"], per_host)
            for h in hj["hosts"])
        # This build, and (--baseline-tune) another one, interleaved in the same run.
        tunes = [("tune", TUNE)] + ([("baseline", baseline_tune)] if baseline_tune else [])
        runs = {name: {"none": [], "rsync": []} for name, _ in tunes}
        for _ in range(c.get("repeat", 1)):
            for name, binary in tunes:
                for syncer in ("none", "rsync"):
                    r = checkpoints_run(tmp, c, hj, host_lines, trial, syncer, binary)
                    print("  checkpoints %s %s: %s" % (name, syncer, json.dumps(r)), file=sys.stderr)
                    runs[name][syncer].append(r)
        retained = c["trials"] * c["keep"] * (c["checkpoint_mb"] << 20)
        out = {"mode": hj["mode"], "bytes_retained": retained, "runs": runs}
        for name, _ in tunes:
            med = lambda syncer, key: statistics.median(r[key] for r in runs[name][syncer])
            r = {"wall_rsync_s": med("rsync", "wall_s"), "wall_none_s": med("none", "wall_s"),
                 "bytes_moved": med("rsync", "bytes_moved"),
                 "checkpoints_published": med("rsync", "published"),
                 "publish_latency_ms": med("rsync", "publish_ms"),
                 "retained_on_head": med("rsync", "retained_on_head")}
            r["overhead_pct"] = (r["wall_rsync_s"] / r["wall_none_s"] - 1) * 100
            r["moved_over_retained"] = r["bytes_moved"] / retained
            if hj["mode"] == "netns":
                r["wire_rx"] = med("rsync", "wire_rx")
                r["wire_over_retained"] = r["wire_rx"] / retained
            out.update(r) if name == "tune" else out.update({"baseline": r})
        return out
    finally:
        subprocess.run([script, "down", hosts_dir], stdout=subprocess.DEVNULL)


OPTUNA_SCRIPT = """
import subprocess, sys, time
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
n, secs, jobs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def objective(trial):
    x = trial.suggest_float("x", 0, 1)
    subprocess.run(["sleep", secs], check=True)
    return x
study = optuna.create_study()
t0 = time.monotonic()
study.optimize(objective, n_trials=n, n_jobs=jobs)
print(time.monotonic() - t0)
"""


def optuna(tmp, c):
    probe = subprocess.run([SYSTEM_PY, "-c", "import optuna; print(optuna.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return {"skipped": "python3-optuna is not installed (scripts/setup.sh --bench)"}
    script = write(os.path.join(tmp, "optuna_bench.py"), OPTUNA_SCRIPT)
    t0 = time.monotonic()
    out = subprocess.run([SYSTEM_PY, script, str(c["trials"]), str(c["process_s"]), str(c["n_jobs"])],
                         check=True, capture_output=True, text=True)
    optuna_wall = time.monotonic() - t0  # interpreter and import included, as a user pays them
    yaml = write(os.path.join(tmp, "optuna.yaml"), f"""
        name: optuna
        trial: {{command: ["sleep", "{c['process_s']}"]}}
        param_space: {{x: {{uniform: [0, 1]}}}}
        num_samples: {c['trials']}
        max_concurrent_trials: {c['n_jobs']}
        hosts: [{{local: {{cpus: {c['n_jobs']}}}}}]
        """)
    tune_wall = run_tune(yaml, tempfile.mkdtemp(dir=tmp))
    ideal = c["trials"] * c["process_s"] / c["n_jobs"]
    return {"optuna_version": probe.stdout.strip(), "optuna_s": optuna_wall,
            "optuna_optimize_s": float(out.stdout.strip().splitlines()[-1]), "tune_s": tune_wall,
            "ideal_s": ideal, "tune_over_optuna": tune_wall / optuna_wall}


WORKLOADS = {"overhead": overhead, "launch": launch, "throughput": throughput, "state": state,
             "checkpoints": checkpoints, "optuna": optuna}


def report(res):
    rows = []
    if "overhead" in res:
        r = res["overhead"]
        rows.append(("1 bookkeeping: sleep-1s trials at conc. 32", "%.1f s" % r["wall_s"],
                     "ideal %.1f s" % r["ideal_s"], "+%.1f%%" % r["overhead_pct"],
                     "<= +2%% (Ray published +%.0f%%)" % r["ray_published_pct"]))
    if "launch" in res:
        r = res["launch"]
        rows.append(("2 launch: %d x true vs xargs -P2" % r["trials"], "%.2f s" % r["tune_s"],
                     "%.2f s" % r["xargs_s"], "%.2fx" % r["tune_over_xargs"], "<= 1.5x"))
        if "parallel_s" in r:
            rows.append(("2 launch: vs GNU parallel -j2", "%.2f s" % r["tune_s"],
                         "%.2f s" % r["parallel_s"], "%.2fx" % r["tune_over_parallel"], "<= 0.5x"))
        if "tmpfs" in r:
            m = r["tmpfs"]
            rows.append(("2 launch: experiment dir on tmpfs vs xargs", "%.2f s" % m["tune_s"],
                         "%.2f s" % m["xargs_s"], "%.2fx" % m["tune_over_xargs"], "(disk cost)"))
    if "throughput" in res:
        r = res["throughput"]
        for l in r["levels"]:
            rows.append(("3 throughput: 32 trials x %d/s" % l["rate_per_trial"],
                         "%.1f s" % l["wall_s"], "%d/s offered" % l["offered_per_s"],
                         "kept up" if l["kept_up"] else "fell behind", ""))
        f = r["flat_out"]
        rows.append(("3 throughput: one trial flat out", "%.0f/s" % f["results_per_s"],
                     "cat: %.2f s" % f["cat_s"], "%.1fx cat" % f["tune_over_cat"], ">= 100000/s"))
    if "state" in res:
        r = res["state"]
        rows.append(("4 state write, %d trials" % r["trials"], "%.1f ms" % r["save_ms"],
                     "all: %.0f ms" % r["save_cold_ms"], "%.2fx" % (r["save_ms"] / r["save_cold_ms"]),
                     "<= 50 ms"))
        rows.append(("4 resume start-up", "%.2f s" % r["resume_startup_s"], "", "", "<= 1 s"))
        rows.append(("4 driver peak RSS", "%.0f MB" % r["driver_max_rss_mb"], "", "", "<= 100 MB"))
    if "checkpoints" in res:
        r = res["checkpoints"]
        if "skipped" in r:
            rows.append(("5 checkpoint-heavy over SSH", "skipped", r["skipped"], "", ""))
        else:
            for label, r5 in [("", r)] + ([("main: ", r["baseline"])] if "baseline" in r else []):
                rows.append(("5 %scheckpoints over SSH: wall vs syncer none" % label,
                             "%.1f s" % r5["wall_rsync_s"], "%.1f s" % r5["wall_none_s"],
                             "%+.1f%%" % r5["overhead_pct"], "<= +10%"))
                rows.append(("5 %scheckpoints published vs retained" % label,
                             "%.0f MB" % (r5["bytes_moved"] / 1e6),
                             "%.0f MB" % (r["bytes_retained"] / 1e6),
                             "%.2fx" % r5["moved_over_retained"], "<= 1.5x"))
                if "wire_rx" in r5:
                    rows.append(("5 %sbytes received over the links" % label,
                                 "%.0f MB" % (r5["wire_rx"] / 1e6),
                                 "%.0f MB" % (r["bytes_retained"] / 1e6),
                                 "%.2fx" % r5["wire_over_retained"], "<= 1.5x"))
                rows.append(("5 %scheckpoint on the head after" % label,
                             "%.0f ms" % r5["publish_latency_ms"], "median", "", ""))
    if "optuna" in res:
        r = res["optuna"]
        if "skipped" in r:
            rows.append(("6 vs Optuna", "skipped", r["skipped"], "", ""))
        else:
            rows.append(("6 %d x 50 ms process, 2 at once vs Optuna %s" % (200, r["optuna_version"]),
                         "%.2f s" % r["tune_s"], "%.2f s" % r["optuna_s"],
                         "%.2fx" % r["tune_over_optuna"], "ideal %.1f s" % r["ideal_s"]))
    print("%-46s %12s %16s %12s  %s" % ("workload", "tune", "baseline", "ratio", "target"))
    for row in rows:
        print("%-46s %12s %16s %12s  %s" % row)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers.json"))
    ap.add_argument("--json", default="bench-results.json")
    ap.add_argument("--only", nargs="*", choices=list(WORKLOADS))
    ap.add_argument("--baseline-tune", help="checkpoints: also run this tune binary (e.g. one "
                    "built from main), interleaved with this build's runs, for before/after figures")
    ap.add_argument("--repeat", type=int, help="checkpoints: runs of each (median reported)")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    if a.repeat:
        cfg["checkpoints"]["repeat"] = a.repeat
    res = {"machine": os.uname().nodename, "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d")}
    t0 = time.monotonic()
    for name, fn in WORKLOADS.items():
        if a.only and name not in a.only:
            continue
        tmp = tempfile.mkdtemp(prefix="tune-peers-")
        try:
            t = time.monotonic()
            if name == "checkpoints":
                res[name] = fn(tmp, cfg[name], a.baseline_tune)
            else:
                res[name] = fn(tmp, cfg[name])
            print("[%s done in %.0f s]" % (name, time.monotonic() - t), file=sys.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    res["total_s"] = time.monotonic() - t0
    with open(a.json, "w") as f:
        json.dump(res, f, indent=2)
    report(res)
    print("(%.0f s in all; figures in %s)" % (res["total_s"], a.json))


if __name__ == "__main__":
    main()
