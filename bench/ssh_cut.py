#!/usr/bin/env python3
"""A worker's link cut mid-run (scripts/test-hosts.sh, network-namespace mode; needs root):
the driver loop's longest stall and longest wait past its timeout while the link is down, and
when the host is declared lost against host_timeout_s (from the moment of the cut).

    bench/ssh_cut.py [--tune BIN] [--baseline-tune OLD_BIN] [--repeat 3] [--host-timeout 5]

Each run: 2 trials (chaos_trial.py, 0.1 s steps, a checkpoint every 3) on one worker; the link
is cut once both run, healed once the host is declared lost; the trials then finish there from
their checkpoints. Figures are medians over the runs; a baseline binary runs the same way in
the same invocation, for a ratio."""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "test-hosts.sh")
TRIAL = os.path.join(ROOT, "tests", "fixtures", "chaos_trial.py")


def log_time(line):
    """The wall-clock time of a tune.log line ("2026-11-25 18:39:05.564 [pid] ...")."""
    stamp = " ".join(line.split()[:2])
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def one_run(tune, tmp, hosts, host_timeout, name):
    h = hosts["hosts"][0]
    storage = os.path.join(tmp, "runs")
    yaml = os.path.join(tmp, name + ".yaml")
    with open(yaml, "w") as f:
        f.write(textwrap.dedent(f"""
            name: {name}
            trial:
              command: ["{sys.executable}", "{TRIAL}"]
            param_space:
              x: {{grid_search: [0.5, 1.5]}}
              steps: 200
              sleep: 0.1
            host_timeout_s: {host_timeout}
            checkpoint_config: {{num_to_keep: 2}}
            sync_config: {{sync_period: 1}}
            hosts:
              - ssh: {{host: {h["host"]}, port: {h["port"]}, user: {hosts["user"]},
                       identity_file: {hosts["identity_file"]},
                       known_hosts_file: {hosts["known_hosts"]}, storage_path: {h["storage_path"]},
                       cpus: 2}}
            """))
    log = os.path.join(storage, name, "tune.log")
    finished = True
    if os.path.exists(os.path.join(storage, name)):
        sys.exit("ssh_cut: %s exists already" % os.path.join(storage, name))
    p = subprocess.Popen([tune, "run", yaml, "--quiet", "--storage-path", storage],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(4)  # both trials running and reporting
        cut_at = time.time()
        subprocess.run([SCRIPT, "cut", hosts_dir_of(hosts), "1"], check=True)
        lost_at = None
        deadline = time.time() + host_timeout + 60
        while lost_at is None and time.time() < deadline:
            time.sleep(0.05)
            with open(log) as f:
                for line in f:
                    if "unreachable for" in line and "re-queued" in line:
                        lost_at = log_time(line)
                        break
        subprocess.run([SCRIPT, "heal", hosts_dir_of(hosts), "1"], check=True)
        try:
            p.wait(timeout=90)  # the trials need ~20 s once the host is back
        except subprocess.TimeoutExpired:
            finished = False  # stuck: Ctrl-C, so that the driver still logs its figures
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open(log) as f:
        text = f.read()
    m = re.findall(r"longest loop stall: (\d+) ms(?:, longest wait past its timeout: (\d+) ms)?", text)
    stall, overrun = m[-1] if m else (None, None)  # no figure: the driver did not end normally
    return {"stall_ms": float(stall) if stall else None,
            "overrun_ms": float(overrun) if overrun else None,
            "lost_after_s": None if lost_at is None else lost_at - cut_at, "rc": p.returncode,
            "finished": finished}


_HOSTS_DIR = {}


def hosts_dir_of(hosts):
    return _HOSTS_DIR["dir"]


def series(label, tune, tmp, hosts, host_timeout, repeat):
    runs = [one_run(tune, tmp, hosts, host_timeout, "%s%d" % (label, k)) for k in range(repeat)]
    med = lambda key: statistics.median(r[key] for r in runs if r[key] is not None) \
        if any(r[key] is not None for r in runs) else float("nan")
    return {"runs": runs, "stall_ms": med("stall_ms"), "overrun_ms": med("overrun_ms"),
            "lost_after_s": med("lost_after_s")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "tune"))
    ap.add_argument("--baseline-tune")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--host-timeout", type=float, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tune-bench-cut-")
    _HOSTS_DIR["dir"] = os.path.join(tmp, "hosts")
    subprocess.run([SCRIPT, "up", _HOSTS_DIR["dir"], "1"], check=True, stdout=subprocess.DEVNULL)
    try:
        with open(os.path.join(_HOSTS_DIR["dir"], "hosts.json")) as f:
            hosts = json.load(f)
        if hosts["mode"] != "netns":
            sys.exit("ssh_cut: needs network-namespace hosts (root) to cut a link")
        out = {"tune": series("tune", a.tune, tmp, hosts, a.host_timeout, a.repeat)}
        if a.baseline_tune:
            out["baseline"] = series("baseline", a.baseline_tune, tmp, hosts, a.host_timeout, a.repeat)
    finally:
        subprocess.run([SCRIPT, "down", _HOSTS_DIR["dir"]], stdout=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
    for label, r in out.items():
        stuck = sum(1 for x in r["runs"] if not x["finished"])
        if stuck:
            print("%s: %d of %d runs never finished after the host came back (stopped by Ctrl-C "
                  "90 s after the heal)" % (label, stuck, len(r["runs"])))
        over = r["overrun_ms"]
        print("%-9s longest loop stall %7.0f ms   longest wait past timeout %7s ms   "
              "host lost %5.2f s after the cut (host_timeout_s %g)   runs: %s" % (
                  label, r["stall_ms"], "n/a" if over != over else "%.0f" % over,
                  r["lost_after_s"], a.host_timeout,
                  ", ".join("%s/%s/%s" % (x["stall_ms"], x["overrun_ms"],
                                          "-" if x["lost_after_s"] is None else "%.2f" % x["lost_after_s"])
                            for x in r["runs"])))
    if "baseline" in out:
        b, t = out["baseline"], out["tune"]
        print("ratio (tune / baseline): stall %.2fx, wait past timeout %.2fx" % (
            t["stall_ms"] / max(b["stall_ms"], 1), t["overrun_ms"] / max(b["overrun_ms"], 1)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
