#!/usr/bin/python3
"""How promptly the driver carries out asha's stops: trial-epochs the trials actually ran beside
trial-epochs recorded in result.json. Every epoch a trial runs (`--sleep` ms asleep, `--work`
ms of CPU) appends a line to epochs_run in its trial dir before it reports; a stop that reaches
the trial late shows as epochs run but not recorded (results after a decision are ignored).

Runs the built `tune` and, with --baseline, another binary (e.g. one built from an older
commit) on the same experiment in the same run, and prints both and their ratio. Load the
machine to see the difference (`--burn N` adds N niced busy loops for the run's duration).

    nice -n 19 bench/schedulers/stop_lag.py [--baseline /path/to/old/tune] [--burn 2]
"""
import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

TRIAL = r"""
import json, os, sys, time
q = float(sys.argv[1]); work = float(sys.argv[2]) / 1000; nap = float(sys.argv[3]) / 1000
path = os.path.join(os.environ["TUNE_TRIAL_DIR"], "epochs_run")
for i in range(1, 28):
    time.sleep(nap)
    end = time.process_time() + work
    while time.process_time() < end:
        pass
    with open(path, "a") as f:
        f.write("%d\n" % i)
    print(json.dumps({"val": q - 1.0 / i}), flush=True)
"""


def burn():
    os.nice(19)
    while True:
        pass


def run(tune, scratch, name, args):
    d = os.path.join(scratch, name)
    os.makedirs(d)
    script = os.path.join(d, "trial.py")
    with open(script, "w") as f:
        f.write(TRIAL)
    exp = {
        "name": name,
        "trial": {"command": [sys.executable, script, "{q}", str(args.work), str(args.sleep)]},
        "param_space": {"q": {"uniform": [0, 1]}},
        "num_samples": args.trials, "seed": args.seed,
        "metric": "val", "mode": "max", "max_concurrent_trials": args.concurrency,
        "scheduler": {"type": "asha", "max_t": 27, "grace_period": 1, "reduction_factor": 3},
    }
    path = os.path.join(d, "experiment.yaml")
    with open(path, "w") as f:
        json.dump(exp, f)
    t = time.monotonic()
    p = subprocess.run([tune, "run", path, "--storage-path", os.path.join(d, "storage"),
                        "--quiet"], capture_output=True, text=True)
    wall = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"{tune} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    exp_dir = os.path.join(d, "storage", name)
    ran = recorded = 0
    for entry in os.listdir(exp_dir):
        td = os.path.join(exp_dir, entry)
        if not entry.startswith("trial_"):
            continue
        for fname, add in (("epochs_run", "ran"), ("result.json", "recorded")):
            p = os.path.join(td, fname)
            n = sum(1 for line in open(p) if line.strip()) if os.path.exists(p) else 0
            if add == "ran":
                ran += n
            else:
                recorded += n
    return ran, recorded, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "tune"))
    ap.add_argument("--baseline", help="another tune binary, run on the same experiment")
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--work", type=float, default=5, help="ms of CPU per epoch")
    ap.add_argument("--sleep", type=float, default=50, help="ms asleep per epoch")
    ap.add_argument("--burn", type=int, default=0, help="niced busy loops meanwhile")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burn)]
    for b in burners:
        b.start()
    scratch = tempfile.mkdtemp(prefix="tune-stop-lag-")
    try:
        rows = [("tune", run(args.tune, scratch, "new", args))]
        if args.baseline:
            rows.append(("baseline", run(args.baseline, scratch, "old", args)))
    finally:
        for b in burners:
            b.terminate()
        shutil.rmtree(scratch, ignore_errors=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"asha, {args.trials} trials x up to 27 epochs of {args.sleep:g}+{args.work:g} ms, "
          f"{args.concurrency} at a time, load {load}:")
    for name, (ran, recorded, wall) in rows:
        print(f"  {name:8} trial-epochs run {ran:5}  recorded {recorded:5}  "
              f"run/recorded {ran / max(recorded, 1):.3f}  wall {wall:.1f} s")
    if len(rows) == 2:
        print(f"  run/recorded, baseline vs tune: "
              f"{(rows[1][1][0] / max(rows[1][1][1], 1)) / (rows[0][1][0] / max(rows[0][1][1], 1)):.2f}x")


if __name__ == "__main__":
    main()
