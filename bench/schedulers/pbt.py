#!/usr/bin/python3
"""PBT against FIFO at equal compute on the digits MLP (configs/pbt_digits.yaml): the same 8
initial configs per seed (the seed picks them), 24 epochs each, two at a time, trained for real
by configs/examples/digits_mlp.py under the built `tune` binary. PBT checks every 3 epochs;
FIFO lets every trial run to the end. PBT trains more epochs than FIFO's 8 x 24 (an exploited
trial redoes epochs from its donor's checkpoint), so each seed also runs `fifo_eq`: FIFO given
at least PBT's compute, ceil(PBT's trial-epochs / 24) trials of the same seed (its first 8 are
FIFO's 8).

Reports per method and seed: the population's best final val_acc (a trial's last epoch), the
best val_acc reported at any epoch, the trial-epochs actually trained (PBT's rows set aside by
exploits included) and the wall time. Needs Debian's python3-sklearn. Run on demand, e.g.:

    nice -n 10 /usr/bin/python3 bench/schedulers/pbt.py --seeds 1 2 3 4 5
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def experiment(name, seed, pbt, samples=8):
    exp = {
        "name": name,
        "trial": {"command": ["/usr/bin/python3", os.path.join(ROOT, "configs", "examples", "digits_mlp.py")],
                  "env": {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}},
        "param_space": {"hidden": 64, "alpha": {"loguniform": [1.0e-5, 1.0e-1]},
                        "lr": {"loguniform": [1.0e-4, 1.0e-1]},
                        "batch_size": {"choice": [16, 32, 64, 128]}, "epochs": 24},
        "num_samples": samples, "seed": seed, "metric": "val_acc", "mode": "max",
        "max_concurrent_trials": 2,
        "checkpoint_config": {"num_to_keep": 2, "checkpoint_score_attribute": "val_acc",
                              "checkpoint_score_order": "max"},
    }
    if pbt:
        exp["scheduler"] = {"type": "pbt", "perturbation_interval": 3, "quantile_fraction": 0.25,
                            "resample_probability": 0.25,
                            "hyperparam_mutations": {"lr": {"loguniform": [1.0e-4, 1.0e-1]},
                                                     "alpha": {"loguniform": [1.0e-5, 1.0e-1]},
                                                     "batch_size": [16, 32, 64, 128]}}
    return exp


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(tune, storage, name, seed, pbt, samples=8):
    spec = os.path.join(storage, name + ".yaml")
    with open(spec, "w") as f:
        json.dump(experiment(name, seed, pbt, samples), f)
    t0 = time.monotonic()
    subprocess.run([tune, "run", spec, "--storage-path", storage, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    final, best, epochs = [], 0.0, 0
    for d in glob.glob(os.path.join(storage, name, "trial_*")):
        r = rows(os.path.join(d, "result.json"))
        final.append(r[-1]["val_acc"])
        best = max([best] + [x["val_acc"] for x in r])
        epochs += len(r)
        for aside in glob.glob(os.path.join(d, "result.before_exploit_*.json")):
            epochs += len(rows(aside))
    policy = os.path.join(storage, name, "pbt_policy.jsonl")
    exploits = len(rows(policy)) if os.path.exists(policy) else 0
    configs = {}
    for d in glob.glob(os.path.join(storage, name, "trial_*")):
        with open(os.path.join(d, "params.json")) as f:
            configs[os.path.basename(d).split("_")[1]] = json.load(f)
    return {"final_best": max(final), "final_mean": statistics.mean(final), "best": best,
            "trial_epochs": epochs, "exploits": exploits, "wall_s": round(wall, 1),
            "trials": len(final), "configs": configs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "tune"))
    ap.add_argument("--out", default=os.path.join(HERE, "pbt-results-%s.json" % datetime.date.today()))
    args = ap.parse_args()
    storage = tempfile.mkdtemp(prefix="pbt-bench-")
    results = {"fifo": {}, "pbt": {}, "fifo_eq": {}}
    try:
        for seed in args.seeds:
            for method in ("fifo", "pbt", "fifo_eq"):
                samples = 8
                if method == "fifo_eq":
                    samples = -(-results["pbt"][seed]["trial_epochs"] // 24)
                r = run(args.tune, storage, "%s-%d" % (method, seed), seed, method == "pbt",
                        samples)
                results[method][seed] = r
                print(method, seed, {k: v for k, v in r.items() if k != "configs"}, flush=True)
            # fifo_eq's first 8 trials are FIFO's 8 (the same draws of the same seed)
            same = all(results["fifo_eq"][seed]["configs"].get(k) == v
                       for k, v in results["fifo"][seed]["configs"].items())
            print("seed %d: fifo_eq starts with fifo's 8 configs: %s" % (seed, same), flush=True)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print("\nmethod  final best (mean ± sd)   final mean of 8   best at any epoch   trial-epochs   wall s")
    for method, per_seed in results.items():
        v = list(per_seed.values())
        fb = [x["final_best"] for x in v]
        print("%-7s %.4f ± %.4f          %.4f            %.4f             %5.0f          %5.0f" % (
            method, statistics.mean(fb), statistics.stdev(fb) if len(fb) > 1 else 0,
            statistics.mean(x["final_mean"] for x in v), statistics.mean(x["best"] for x in v),
            statistics.mean(x["trial_epochs"] for x in v), statistics.mean(x["wall_s"] for x in v)))


if __name__ == "__main__":
    sys.exit(main())
