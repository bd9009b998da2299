#!/usr/bin/env python3
"""A big checkpoint moved across filesystems on a worker, and another trial's results meanwhile
(scripts/test-hosts.sh, network-namespace mode; needs root).

    bench/ssh_adopt_stall.py [--tune BIN] [--baseline-tune OLD_BIN] [--repeat 3] [--gib 2]

Each run: one worker whose experiment dir is a tmpfs of its own (test-hosts.sh fill), so that a
checkpoint a trial writes in the worker's /tmp (this machine's disk) is copied into its trial
dir, not renamed. Two trials there: one writes GIB GiB into a mkdtemp() dir in /tmp and reports
it as its checkpoint; the other prints a result every 20 ms. The bench watches the second
trial's result.json on the head every 2 ms and reports the longest gap between two of its
growths while the first trial's checkpoint is being moved in (from its report until the run
ends), and the time the move took (report to registration, from the driver's log). With
`syncer: none`: only the move is measured, not a copy to the head. A baseline binary runs the
same way in the same invocation, for a ratio."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "test-hosts.sh")

TRIAL = """
import json, os, sys, tempfile, time
with open(os.environ["TUNE_CONFIG_FILE"]) as f:
    cfg = json.load(f)
if cfg["role"] == "ticker":
    end = time.time() + float(cfg["ticks_s"])
    i = 0
    while time.time() < end:
        i += 1
        print(json.dumps({"i": i}), flush=True)
        time.sleep(0.02)
    sys.exit(0)
gib = float(cfg["gib"])
d = tempfile.mkdtemp(prefix="tune-adopt-stall-")
block = os.urandom(1 << 20)
with open(os.path.join(d, "weights.bin"), "wb") as f:
    for _ in range(int(gib * 1024)):
        f.write(block)
print(json.dumps({"i": 1, "t": time.time(), "checkpoint": d}), flush=True)
time.sleep(1)
"""


def watch_growth(path, stop, out):
    """Appends (time, size) each time `path` grows, looking every 2 ms."""
    last = -1
    while not stop.is_set():
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1
        if size != last and size >= 0:
            out.append((time.time(), size))
            last = size
        time.sleep(0.002)


def one_run(tune, tmp, hosts, hosts_dir, gib, name):
    h = hosts["hosts"][0]
    trial = os.path.join(tmp, "trial.py")
    with open(trial, "w") as f:
        f.write(TRIAL)
    storage = os.path.join(tmp, "runs-" + name)
    yaml = os.path.join(tmp, name + ".yaml")
    # trial 1: the big checkpoint; trial 2: the ticker, for as long as a slow copy could take
    with open(yaml, "w") as f:
        f.write(textwrap.dedent(f"""
            name: {name}
            trial:
              command: ["{sys.executable}", "{trial}"]
            param_space:
              role: {{grid_search: [big, ticker]}}
              gib: {gib}
              ticks_s: {max(10, gib * 8)}
            max_concurrent_trials: 2
            sync_config: {{syncer: none}}
            hosts:
              - ssh: {{host: {h["host"]}, port: {h["port"]}, user: {hosts["user"]},
                       identity_file: {hosts["identity_file"]},
                       known_hosts_file: {hosts["known_hosts"]}, storage_path: {h["storage_path"]},
                       cpus: 2}}
            """))
    subprocess.run([SCRIPT, "fill", hosts_dir, "1", name, "%dm" % int(gib * 1024 * 2 + 256)],
                   check=True, timeout=30)
    growths = []
    stop = threading.Event()
    try:
        p = subprocess.Popen([tune, "run", yaml, "--quiet", "--storage-path", storage],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # (the ticker's dir on the head, once it exists)
        exp = os.path.join(storage, name)
        deadline = time.time() + 60
        ticker_dir = None
        while ticker_dir is None and time.time() < deadline:
            time.sleep(0.01)
            if os.path.isdir(exp):
                for d in os.listdir(exp):
                    if "ticker" in d:
                        ticker_dir = os.path.join(exp, d)
        t = threading.Thread(target=watch_growth,
                             args=(os.path.join(ticker_dir, "result.json"), stop, growths))
        t.start()
        p.wait(timeout=600)
    finally:
        stop.set()
        subprocess.run([SCRIPT, "unfill", hosts_dir, "1", name], timeout=30)
    big_dir = [d for d in os.listdir(exp) if "big" in d][0]
    with open(os.path.join(exp, big_dir, "result.json")) as f:
        reported = json.loads(f.readline())["t"]
    with open(os.path.join(exp, "tune.log")) as f:
        log = f.read()
    ok = "not taken" not in log and "cannot move" not in log
    # the ticker's growths from the last one before the report on
    times = [g for g, _ in growths]
    first = max([k for k, g in enumerate(times) if g < reported], default=0)
    during = times[first:]
    gaps = [b - a for a, b in zip(during, during[1:])]
    if os.environ.get("ADOPT_STALL_KEEP"):  # (analysis: the run's experiment dir)
        kept = os.environ["ADOPT_STALL_KEEP"] + "-" + name
        shutil.copytree(exp, kept, ignore=shutil.ignore_patterns("checkpoint_*"))
        with open(kept + "/growths.json", "w") as f:
            json.dump({"reported": reported, "growths": growths}, f)
        print("kept:", kept, file=sys.stderr)
    shutil.rmtree(storage, ignore_errors=True)
    return {"longest_gap_ms": max(gaps) * 1000 if gaps else None, "growths": len(during),
            "adopted": ok, "rc": p.returncode}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "tune"))
    ap.add_argument("--baseline-tune")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gib", type=float, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tune-bench-adopt-")
    hosts_dir = os.path.join(tmp, "hosts")
    subprocess.run([SCRIPT, "up", hosts_dir, "1"], check=True, stdout=subprocess.DEVNULL)
    out = {}
    try:
        with open(os.path.join(hosts_dir, "hosts.json")) as f:
            hosts = json.load(f)
        if hosts["mode"] != "netns":
            sys.exit("ssh_adopt_stall: needs network-namespace hosts (root)")
        tunes = [("tune", a.tune)] + ([("baseline", a.baseline_tune)] if a.baseline_tune else [])
        runs = {label: [] for label, _ in tunes}
        for _ in range(a.repeat):  # (interleaved)
            for label, binary in tunes:
                runs[label].append(one_run(binary, tmp, hosts, hosts_dir, a.gib,
                                           "%s%d" % (label, len(runs[label]))))
        for label, r in runs.items():
            gaps = [x["longest_gap_ms"] for x in r if x["longest_gap_ms"] is not None]
            out[label] = {"runs": r, "longest_gap_ms": statistics.median(gaps) if gaps else None}
    finally:
        subprocess.run([SCRIPT, "down", hosts_dir], stdout=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
    for label, r in out.items():
        print("%-9s another trial's longest wait for its results while a %.1f GiB checkpoint was "
              "moved in: median %s ms   runs: %s" % (
                  label, a.gib, "n/a" if r["longest_gap_ms"] is None else "%.0f" % r["longest_gap_ms"],
                  ", ".join("%s%s" % ("-" if x["longest_gap_ms"] is None else "%.0f" % x["longest_gap_ms"],
                                      "" if x["adopted"] else " (not adopted)") for x in r["runs"])))
    if "baseline" in out and out["baseline"]["longest_gap_ms"] and out["tune"]["longest_gap_ms"]:
        print("ratio (tune / baseline): %.2fx" % (
            out["tune"]["longest_gap_ms"] / out["baseline"]["longest_gap_ms"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
