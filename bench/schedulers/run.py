#!/usr/bin/python3
"""Schedulers on the digits MLP (configs/asha_digits.yaml): FIFO, ASHA, HyperBand and median
stopping run by the built `tune` binary, beside Optuna's SuccessiveHalvingPruner,
HyperbandPruner and MedianPruner in-process, on the same 60 configs per seed.

For each seed: (1) a quick tune run samples the experiment's 60 configs (the seed picks them);
(2) each config's 27-epoch curve is computed once with the example's own training loop
(objective.py, 2 processes); (3) every tune method runs the real driver, scheduler, checkpoints
and pause/resume on replay_trial.py, which reports that curve epoch by epoch; (4) Optuna runs
the same curves with RandomSampler(seed) and the same configs enqueued in the same order.
The MLP's training is deterministic (fixed split and model seed), so replaying is exact;
`--check-real asha` runs the real example under tune and compares every value with the curves.

Reports per method and seed: the best val_acc reported, trial-epochs used, and trial-epochs until
the best so far reaches FIFO's final best. Needs Debian's python3 (python3-sklearn,
python3-optuna). Run on demand, e.g.:

    nice -n 10 /usr/bin/python3 bench/schedulers/run.py --seeds 1 2 3 4 5
    nice -n 10 /usr/bin/python3 bench/schedulers/run.py --seeds 8 --methods asha [--rf 4]

`--methods` runs some methods only (FIFO's best, the target, is the best value of the seed's
curves either way); `--rf` sets the reduction factor of asha, hyperband and Optuna's pruners.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import objective  # noqa: E402

EPOCHS, TRIALS = 27, 60
TUNE_METHODS = {
    "fifo": None,
    "asha": {"type": "asha", "max_t": EPOCHS, "grace_period": 1, "reduction_factor": 3},
    "hyperband": {"type": "hyperband", "max_t": EPOCHS, "reduction_factor": 3},
    # grace 3: epoch-1 accuracies of small learning rates say little; 3 samples as Ray's default.
    "median_stopping": {"type": "median_stopping", "grace_period": 3, "min_samples_required": 3},
}
OPTUNA_METHODS = ("optuna_sha", "optuna_hyperband", "optuna_median")
SPACE = {
    "hidden": {"choice": [16, 32, 64, 128]},
    "alpha": {"loguniform": [1.0e-5, 1.0e-1]},
    "lr": {"loguniform": [1.0e-4, 1.0e-1]},
    "batch_size": {"choice": [16, 32, 64, 128]},
    "epochs": EPOCHS,
}


def experiment(name, seed, command, scheduler, env):
    """The experiment file of one tune run (JSON is YAML)."""
    exp = {
        "name": name,
        "trial": {"command": command, "env": {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                                              "OPENBLAS_NUM_THREADS": "1", **env}},
        "param_space": SPACE, "num_samples": TRIALS, "seed": seed,
        "metric": "val_acc", "mode": "max", "max_concurrent_trials": 2,
        "checkpoint_config": {"num_to_keep": 1, "checkpoint_score_attribute": "val_acc",
                              "checkpoint_score_order": "max"},
    }
    if scheduler:
        exp["scheduler"] = scheduler
    return exp


def run_tune(args, name, seed, command, scheduler, env, workdir=None):
    """Runs one experiment with the built tune; returns its dir and wall seconds."""
    d = os.path.join(args.scratch, name)
    shutil.rmtree(d, ignore_errors=True)  # a scratch dir of this benchmark's own
    os.makedirs(d)
    exp = experiment(name, seed, command, scheduler, env)
    if workdir:
        exp["trial"]["workdir"] = workdir
    path = os.path.join(d, "experiment.yaml")
    with open(path, "w") as f:
        json.dump(exp, f, indent=1)
    t = time.monotonic()
    cmd = [args.tune, "run", path, "--storage-path", os.path.join(d, "storage"), "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return os.path.join(d, "storage", name), wall


def trials_of(exp_dir):
    """{trial id: (params, [result rows])} read back from the trial dirs."""
    out = {}
    for entry in sorted(os.listdir(exp_dir)):
        p = os.path.join(exp_dir, entry, "params.json")
        if not entry.startswith("trial_") or not os.path.exists(p):
            continue
        with open(p) as f:
            params = json.load(f)
        rows = []
        r = os.path.join(exp_dir, entry, "result.json")
        if os.path.exists(r):
            with open(r) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        out[entry.split("_")[1]] = (params, rows)
    return out


def sample_configs(args, seed):
    """The seed's 60 configs in trial order, as tune samples them."""
    cmd = ["/usr/bin/python3", "-c", "import tune_trial; tune_trial.report(dict(val_acc=0))"]
    exp_dir, _ = run_tune(args, f"sample-s{seed}", seed, cmd, None, {})
    trials = trials_of(exp_dir)
    return [trials[t][0] for t in sorted(trials)]


def _curve(cfg):
    return objective.key(cfg), objective.curve(cfg, EPOCHS)


def curves_for(args, seed, configs):
    """{key: [(val_acc, seconds)] * 27}, computed once per seed and kept in the scratch dir."""
    path = os.path.join(args.scratch, f"curves-s{seed}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    # Small batches cost most: start them first so the two workers end together.
    todo = sorted(configs, key=lambda c: c["batch_size"])
    with ProcessPoolExecutor(2) as pool:
        curves = dict(pool.map(_curve, todo))
    with open(path + ".tmp", "w") as f:
        json.dump(curves, f)
    os.replace(path + ".tmp", path)
    return curves


def all_curves(args, seeds):
    """Computes the curves of every seed in one pool of 2 (seed by seed, each saved when done)."""
    from concurrent.futures import as_completed

    with ProcessPoolExecutor(2) as pool:
        for seed in seeds:
            path = os.path.join(args.scratch, f"curves-s{seed}.json")
            if os.path.exists(path):
                continue
            t = time.monotonic()
            configs = sorted(sample_configs(args, seed), key=lambda c: c["batch_size"])
            curves = dict(f.result() for f in as_completed(pool.submit(_curve, c) for c in configs))
            with open(path + ".tmp", "w") as f:
                json.dump(curves, f)
            os.replace(path + ".tmp", path)
            print(f"seed {seed}: curves in {time.monotonic() - t:.0f} s", file=sys.stderr,
                  flush=True)


def tune_method(args, seed, method, curves_path):
    """Runs one method on the replayed curves; returns its figures and anomalies."""
    name = f"{method}-s{seed}" + (f"-rf{args.rf}" if args.rf != 3 else "")
    log = os.path.join(args.scratch, name + ".epochs.jsonl")
    if os.path.exists(log):
        os.remove(log)
    env = {"BENCH_CURVES": curves_path, "BENCH_EPOCH_LOG": log,
           "BENCH_TIME_SCALE": str(args.time_scale)}
    cmd = ["/usr/bin/python3", os.path.join(HERE, "replay_trial.py")]
    sched = TUNE_METHODS[method] and {**TUNE_METHODS[method]}
    if sched and "reduction_factor" in sched:
        sched["reduction_factor"] = args.rf
    exp_dir, wall = run_tune(args, name, seed, cmd, sched, env)
    trials = trials_of(exp_dir)
    rows, odd = [], []
    for tid, (params, rs) in trials.items():
        its = [r.get("training_iteration") for r in rs]
        if its != list(range(1, len(its) + 1)):
            odd.append(f"trial {tid}: result.json iterations {its}")
        rows += [(r["timestamp"], r.get("time_total_s", 0), tid, r["val_acc"]) for r in rs]
    with open(log) as f:
        ran = [json.loads(line) for line in f]
    seen = {}
    for e in ran:
        seen[(e["trial"], e["epoch"])] = seen.get((e["trial"], e["epoch"]), 0) + 1
    twice = {k: n for k, n in seen.items() if n > 1}
    if twice:
        odd.append(f"epochs run more than once (trial, epoch): count {sorted(twice.items())}")
    rows.sort(key=lambda r: (r[0], r[1]))
    return {"trials": len(trials), "rows": len(rows), "epochs_run": len(ran), "wall_s": wall,
            "values": [r[3] for r in rows], "odd": odd, "dir": exp_dir}


def optuna_method(seed, method, configs, curves, rf=3):
    """Optuna 3.1 in-process on the same configs and curves; values in trial order."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = {
        "optuna_sha": lambda: optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=rf, min_early_stopping_rate=0),
        "optuna_hyperband": lambda: optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=EPOCHS, reduction_factor=rf),
        "optuna_median": lambda: optuna.pruners.MedianPruner(
            n_startup_trials=3, n_warmup_steps=3),
    }[method]()
    study = optuna.create_study(study_name=f"digits-s{seed}", direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=seed), pruner=pruner)
    for c in configs:
        study.enqueue_trial({k: c[k] for k in objective.PARAMS})
    values = []

    def objective_fn(trial):
        cfg = {"hidden": trial.suggest_categorical("hidden", [16, 32, 64, 128]),
               "alpha": trial.suggest_float("alpha", 1e-5, 1e-1, log=True),
               "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
               "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64, 128])}
        points = curves[objective.key(cfg)]
        acc = None
        for epoch in range(EPOCHS):
            acc = points[epoch][0]
            values.append(acc)
            trial.report(acc, epoch + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return acc

    study.optimize(objective_fn, n_trials=TRIALS)
    return {"trials": len(study.trials), "rows": len(values), "epochs_run": len(values),
            "values": values, "odd": []}


def figures(values, target):
    """best, trial-epochs used, trial-epochs until the best so far reaches target."""
    best, reach = float("-inf"), None
    for i, v in enumerate(values):
        best = max(best, v)
        if reach is None and best >= target - 1e-12:
            reach = i + 1
    return {"best": best, "epochs": len(values), "reach": reach, "gap": target - best}


def check_real(args, seed, method, curves):
    """Runs configs/examples/digits_mlp.py itself under tune and compares with the curves."""
    name = f"real-{method}-s{seed}"
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "configs", "examples", "digits_mlp.py")]
    exp_dir, wall = run_tune(args, name, seed, cmd, TUNE_METHODS[method], {},
                             workdir=os.path.join(ROOT, "configs"))
    trials = trials_of(exp_dir)
    bad, n, values = [], 0, []
    for tid, (params, rows) in sorted(trials.items()):
        pts = curves[objective.key(params)]
        for r in rows:
            n += 1
            if r["val_acc"] != pts[r["epoch"] - 1][0]:
                bad.append((tid, r["epoch"], r["val_acc"], pts[r["epoch"] - 1][0]))
        values += [(r["timestamp"], r["val_acc"]) for r in rows]
    values = [v for _, v in sorted(values)]
    return {"rows": n, "mismatches": bad, "wall_s": wall, "values": values}


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    fmt = (lambda x: f"{x:.4f}") if isinstance(xs[0], float) else (lambda x: f"{x:g}")
    return f"{fmt(statistics.median(xs))} [{fmt(min(xs))}, {fmt(max(xs))}]"


def table(per_seed):
    """Prints the markdown table of medians and [min, max] over the seeds."""
    seeds = sorted(per_seed)
    methods = [m for m in list(TUNE_METHODS) + list(OPTUNA_METHODS)
               if any(m in per_seed[s] for s in seeds)]
    methods += sorted({m for s in seeds for m in per_seed[s] if m.startswith("real_")})
    print(f"\nseeds {seeds}; {TRIALS} trials x up to {EPOCHS} epochs; median [min, max]\n")
    print("| method | best val_acc | FIFO best − best | trial-epochs | epochs run (log) "
          "| until FIFO's best | reached | within 0.002 using ≤ 1/5 of FIFO's epochs |")
    print("|---|---|---|---|---|---|---|---|")
    for m in methods:
        ss = [s for s in seeds if m in per_seed[s]]
        rs = [per_seed[s][m] for s in ss]
        ok = sum(r["gap"] <= 0.002 + 1e-12 and r["epochs"] <= EPOCHS * TRIALS / 5
                 for s, r in zip(ss, rs))
        print(f"| {m} | {spread([r['best'] for r in rs])} | {spread([r['gap'] for r in rs])} "
              f"| {spread([r['epochs'] for r in rs])} | {spread([r['epochs_run'] for r in rs])} "
              f"| {spread([r['reach'] for r in rs])} "
              f"| {sum(r['reach'] is not None for r in rs)}/{len(rs)} | {ok}/{len(rs)} |")
    print("\nper seed: best val_acc / trial-epochs / until FIFO's best (— not reached)\n")
    print("| seed | " + " | ".join(methods) + " |")
    print("|---" * (len(methods) + 1) + "|")
    for s in seeds:
        cells = []
        for m in methods:
            r = per_seed[s].get(m)
            cells.append("" if r is None else
                         f"{r['best']:.4f} / {r['epochs']} / {r['reach'] or '—'}")
        print(f"| {s} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "tune"))
    ap.add_argument("--scratch", default="/tmp/tune-bench-schedulers")
    ap.add_argument("--time-scale", type=float, default=0.5,
                    help="replayed epochs sleep this times the real epoch's seconds")
    ap.add_argument("--methods", nargs="+", metavar="METHOD",
                    choices=list(TUNE_METHODS) + list(OPTUNA_METHODS),
                    default=list(TUNE_METHODS) + list(OPTUNA_METHODS),
                    help="the methods to run (default all); FIFO's best is then taken from "
                         "the curves")
    ap.add_argument("--rf", type=int, default=3,
                    help="reduction_factor of asha, hyperband and Optuna's pruners (default 3)")
    ap.add_argument("--check-real", metavar="METHOD", choices=list(TUNE_METHODS),
                    help="also run the real example with this method on the first seed")
    ap.add_argument("--curves-only", action="store_true",
                    help="only compute (and cache) the seeds' curves")
    ap.add_argument("--aggregate", nargs="+", metavar="JSON",
                    help="only print the table of earlier runs' JSON files")
    ap.add_argument("--json", default="bench-schedulers.json")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    if args.aggregate:
        per_seed = {}
        for path in args.aggregate:
            with open(path) as f:
                per_seed.update({int(k): v for k, v in json.load(f)["per_seed"].items()})
        return table(per_seed)
    if args.curves_only:
        return all_curves(args, args.seeds)
    per_seed = {}
    for seed in args.seeds:
        t0 = time.monotonic()
        configs = sample_configs(args, seed)
        curves = curves_for(args, seed, configs)
        print(f"seed {seed}: {len(configs)} configs, curves in {time.monotonic() - t0:.0f} s",
              file=sys.stderr, flush=True)
        curves_path = os.path.join(args.scratch, f"curves-s{seed}.json")
        raw = {m: tune_method(args, seed, m, curves_path) for m in TUNE_METHODS
               if m in args.methods}
        raw.update({m: optuna_method(seed, m, configs, curves, args.rf) for m in OPTUNA_METHODS
                    if m in args.methods})
        if args.check_real and seed == args.seeds[0]:
            raw["real_" + args.check_real] = check_real(args, seed, args.check_real, curves)
        # FIFO's best is the best value of any of the 60 curves (FIFO runs them all).
        target = max(p[0] for c in configs for p in curves[objective.key(c)])
        if "fifo" in raw and max(raw["fifo"]["values"]) != target:
            raw["fifo"]["odd"].append(f"best {max(raw['fifo']['values'])} != curves' {target}")
        res = {}
        for m, r in raw.items():
            res[m] = {**figures(r["values"], target),
                      **{k: v for k, v in r.items() if k != "values"}}
            print(f"seed {seed} {m:18} best {res[m]['best']:.4f} epochs {res[m]['epochs']:5} "
                  f"reach {res[m]['reach']} {r.get('odd') or r.get('mismatches') or ''}",
                  file=sys.stderr, flush=True)
        per_seed[seed] = res
    table(per_seed)
    with open(args.json, "w") as f:
        json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "seeds": args.seeds, "time_scale": args.time_scale, "rf": args.rf,
                   "methods": args.methods,
                   "per_seed": per_seed}, f, indent=1)


if __name__ == "__main__":
    main()
