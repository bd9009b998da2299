#!/usr/bin/python3
"""Searchers on the digits problem of configs/asha_digits.yaml, from precomputed curves.

(a) Best validation accuracy after 30 and 60 sequential trials (each trained the full 27
    epochs; a trial's value is its epoch-27 val_acc): native `tpe` and `random` (in-process,
    digits_bench.cpp), and Optuna 3.1's TPESampler (defaults, seeded) through `tune_optuna`'s
    Searcher, given the ops the driver sends (in-process: one Optuna import for all seeds).
(b) BOHB + HyperBand vs random + HyperBand: synchronous HyperBand (max_t 27, rf 3; the best
    ceil(n / 3) of a rung go on, as tune's hyperband keeps them), the same brackets for both, so
    the same trial-epochs; best val_acc reported at any epoch. --no-optuna leaves out (a)'s
    tune_optuna column (the slow part).

(d) --optuna-alone: Optuna 3.1's TPESampler (defaults, seeded) alone, no tune code: a study
    optimised in-process over the same space and lookup, (a)'s trials and seeds.
(e) --hartmann: BOHB vs random search under the same synchronous HyperBand on a harder
    multi-fidelity problem with no ceiling: Hartmann-6 whose early epochs are biased toward a
    wrong region and noisy (digits_bench.cpp, Hartmann), 1, 2, 4 and 8 HyperBand iterations
    (49 trials, 375 trial-epochs each), --seeds seeds; regret at epoch 27.
(c) --driver N: (b) through the real driver: the built `tune` runs a generated experiment
    (`scheduler: hyperband`, max_t 27, rf 3, 98 trials, with `search_alg: bohb` or random
    search) on digits_replay_trial.py, which replays the config's curve (instant, one line per
    epoch), for seeds 0..N-1; best val_acc and trial-epochs read back from the trials'
    result.json, beside the in-process (b) figures of the same seeds.

A config is scored with the curve of the nearest config (same hidden and batch_size, nearest in
log10 alpha, log10 lr) of bench/search/digits-curves.json: 420 curves the scheduler benchmark
computed with the example's own training loop (digits_table.py). Training is replaced by a
lookup, so 20 seeds cost seconds; the problem is the example's, made piecewise constant.
Prints median [q1, q3] per method and writes the raw numbers to --out.

    nice -n 19 /usr/bin/python3 bench/search/digits_search.py --build build --seeds 20 \\
        --out bench/search/digits-results-<date>.json
    nice -n 19 /usr/bin/python3 bench/search/digits_search.py --build build --driver 5 \\
        --out bench/search/digits-driver-<date>.json
    nice -n 19 /usr/bin/python3 bench/search/digits_search.py --optuna-alone --seeds 20 \\
        --out bench/search/digits-optuna-<date>.json
    nice -n 19 /usr/bin/python3 bench/search/digits_search.py --build build --hartmann --seeds 20 \\
        --out bench/search/hartmann-mf-<date>.json
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SPACE = {"hidden": {"choice": [16, 32, 64, 128]}, "alpha": {"loguniform": [1e-5, 1e-1]},
         "lr": {"loguniform": [1e-4, 1e-1]}, "batch_size": {"choice": [16, 32, 64, 128]},
         "epochs": 27}


class Table:
    """digits_table.py's curves; a config gets the nearest listed one's (as digits_bench.cpp)."""

    def __init__(self, path):
        with open(path) as f:
            t = json.load(f)
        self.rows = {}
        for r in t["configs"]:
            self.rows.setdefault((r["hidden"], r["batch_size"]), []).append(
                (math.log10(r["alpha"]), math.log10(r["lr"]), r["val_acc"]))

    def curve(self, c):
        la, ll = math.log10(c["alpha"]), math.log10(c["lr"])
        best, best_d = None, math.inf
        for ra, rl, acc in self.rows[(int(c["hidden"]), int(c["batch_size"]))]:
            d = (ra - la) * (ra - la) + (rl - ll) * (rl - ll)
            if d < best_d:
                best, best_d = acc, d
        return best

    def best_possible(self):
        return max(acc[-1] for rows in self.rows.values() for _, _, acc in rows)


def running_best(values):
    out, top = [], 0.0
    for v in values:
        top = max(top, v)
        out.append(top)
    return out


def tune_optuna_run(optuna, table, seed, trials):
    """Best-so-far with tune_optuna's Searcher (its space mapping, ask/tell and bookkeeping),
    given the ops the driver would send, in-process: one Optuna import for every seed."""
    sys.path.insert(0, os.path.join(ROOT, "lib", "helpers", "python"))
    from tune_optuna.searcher import Searcher
    s = Searcher(optuna, "TPESampler", {})
    s.init({"op": "init", "space": SPACE, "metric": "val_acc", "mode": "max", "seed": seed,
            "state": None})
    accs = []
    for i in range(trials):
        tid = "%05d" % i
        cfg = s.suggest(tid)
        acc = table.curve(cfg)[-1]
        accs.append(acc)
        s.complete(tid, {"val_acc": acc, "training_iteration": 27}, "TERMINATED", cfg)
    return running_best(accs)


def optuna_alone_run(optuna, table, seed, trials):
    """Best-so-far of Optuna's TPESampler alone (study.optimize on the lookup)."""
    accs = []

    def objective(trial):
        cfg = {"hidden": trial.suggest_categorical("hidden", [16, 32, 64, 128]),
               "alpha": trial.suggest_float("alpha", 1e-5, 1e-1, log=True),
               "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
               "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64, 128])}
        accs.append(table.curve(cfg)[-1])
        return accs[-1]

    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=trials)
    return running_best(accs)


def optuna_alone_main(a, table):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    bests = []
    for seed in range(a.seeds):
        bests.append(optuna_alone_run(optuna, table, seed, a.trials))
        print(f"optuna alone: seed {seed} done", file=sys.stderr, flush=True)
    ceiling = table.best_possible()
    out = {"seeds": a.seeds, "trials": a.trials, "runs": bests, "summary": {}}
    print(f"(d) Optuna {optuna.__version__} TPESampler alone, best val_acc after N trials, "
          "median [q1, q3], seeds at the ceiling")
    for n in (10, 30, a.trials):
        s = summary([b[n - 1] for b in bests])
        s["at_ceiling"] = sum(b[n - 1] >= ceiling - 1e-9 for b in bests)
        out["summary"][str(n)] = s
        print(f"  N={n}: {s['median']:.4f} [{s['q1']:.4f}, {s['q3']:.4f}]; "
              f"{s['at_ceiling']}/{len(bests)} at the ceiling")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def hartmann_main(a):
    exe = os.path.join(a.build, "bench", "tune_bench_digits")
    out = {"seeds": a.seeds, "iters": {}}
    print("(e) Hartmann-6, biased noisy early epochs: regret at epoch 27, median [q1, q3]")
    for iters in (1, 2, 4, 8):
        lines = subprocess.run([exe, "hartmann", str(a.seeds), str(iters)], check=True,
                               capture_output=True, text=True).stdout.splitlines()
        rs = [json.loads(line) for line in lines]
        row = {}
        for alg in ("bohb", "random"):
            row[alg] = summary([r["regret"] for r in rs if r["alg"] == alg])
            row[alg]["regrets"] = [r["regret"] for r in rs if r["alg"] == alg]
        wins = sum(b < r for b, r in zip(row["bohb"]["regrets"], row["random"]["regrets"]))
        row["bohb_better_seeds"] = wins
        out["iters"][str(iters)] = row
        print(f"  x{iters} ({rs[0]['trials']} trials, {rs[0]['epochs']} trial-epochs): " +
              "  ".join(f"{alg} {row[alg]['median']:.3f} [{row[alg]['q1']:.3f}, "
                        f"{row[alg]['q3']:.3f}]" for alg in ("bohb", "random")) +
              f"  bohb lower in {wins}/{a.seeds} seeds")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def summary(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2]}


def report(a, table, runs, hb):
    """Prints the summaries and writes --out (called again as tune_optuna's seeds come in)."""
    results = {"seeds": a.seeds, "trials": a.trials, "search": {}, "hyperband": {}}
    print(f"(a) best val_acc after N sequential trials (epoch 27), median [q1, q3]; the best "
          f"listed curve ends at {table.best_possible():.4f}")
    for alg, bests in runs.items():
        if len(bests) < 2:
            continue
        row = {str(n): summary([b[n - 1] for b in bests]) for n in (30, a.trials)}
        results["search"][alg] = {"seeds": len(bests), "summary": row, "runs": bests}
        print(f"  {alg:24s} {len(bests):2d} seeds  " + "  ".join(
            f"N={n}: {s['median']:.4f} [{s['q1']:.4f}, {s['q3']:.4f}]" for n, s in row.items()))
    print(f"(b) synchronous HyperBand x{a.hb_iters} (max_t 27, rf 3), best val_acc reported, "
          "median [q1, q3]")
    for alg, rs in hb.items():
        s, f = summary([r["best"] for r in rs]), summary([r["final_best"] for r in rs])
        results["hyperband"][alg] = {"seeds": len(rs), "best": s, "final_best": f, "runs": rs}
        print(f"  {alg:8s} {len(rs)} seeds  best {s['median']:.4f} [{s['q1']:.4f}, "
              f"{s['q3']:.4f}]  at epoch 27 {f['median']:.4f} [{f['q1']:.4f}, {f['q3']:.4f}]  "
              f"trials {rs[0]['trials']}, trial-epochs {rs[0]['epochs']}")
    sys.stdout.flush()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


def driver_run(a, scratch, alg, seed):
    """One tune run of 98 trials under hyperband; returns best val_acc and trial-epochs."""
    name = f"{alg}-s{seed}"
    exp = {
        "name": name,
        "trial": {"command": ["/usr/bin/python3", os.path.join(HERE, "digits_replay_trial.py")],
                  "env": {"PYTHONUNBUFFERED": "1", "BENCH_CURVES": os.path.abspath(a.table)}},
        "param_space": SPACE, "num_samples": 49 * a.hb_iters, "seed": seed,
        "metric": "val_acc", "mode": "max", "max_concurrent_trials": a.concurrency,
        "scheduler": {"type": "hyperband", "max_t": 27, "reduction_factor": 3},
        "checkpoint_config": {"num_to_keep": 1},
    }
    if alg == "bohb":
        exp["search_alg"] = {"type": "bohb"}
    d = os.path.join(scratch, name)
    os.makedirs(d)
    path = os.path.join(d, "experiment.yaml")
    with open(path, "w") as f:
        json.dump(exp, f, indent=1)  # JSON is YAML
    tune = os.path.join(a.build, "tune")
    t = time.monotonic()
    p = subprocess.run([tune, "run", path, "--storage-path", os.path.join(d, "storage"),
                        "--quiet"], capture_output=True, text=True)
    wall = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"tune run {path} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    exp_dir = os.path.join(d, "storage", name)
    best, final_best, epochs, trials = 0.0, 0.0, 0, 0
    for entry in os.listdir(exp_dir):
        r = os.path.join(exp_dir, entry, "result.json")
        if not entry.startswith("trial_") or not os.path.exists(r):
            continue
        trials += 1
        with open(r) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        epochs += len(rows)
        for row in rows:
            best = max(best, row["val_acc"])
            if row["epoch"] == 27:
                final_best = max(final_best, row["val_acc"])
    shutil.rmtree(d, ignore_errors=True)  # this run's own dir; the figures are read
    return {"alg": alg, "seed": seed, "best": best, "final_best": final_best, "epochs": epochs,
            "trials": trials, "wall_s": round(wall, 1)}


def driver_main(a, table):
    """(c): bohb and random under the driver's hyperband, beside the in-process (b)."""
    exe = os.path.join(a.build, "bench", "tune_bench_digits")
    out = subprocess.run([exe, "hyperband", a.table, str(a.driver), str(a.hb_iters)],
                         check=True, capture_output=True, text=True).stdout
    sim = {(r["alg"], r["seed"]): r for r in map(json.loads, out.splitlines())}
    scratch = tempfile.mkdtemp(prefix="digits-driver-")
    runs = []
    try:
        for seed in range(a.driver):
            for alg in ("bohb", "random"):
                r = driver_run(a, scratch, alg, seed)
                s = sim[(alg, seed)]
                r["in_process"] = {k: s[k] for k in ("best", "final_best", "epochs", "trials")}
                runs.append(r)
                print(f"  seed {seed:2d} {alg:6s} driver: best {r['best']:.4f} at epoch 27 "
                      f"{r['final_best']:.4f}, {r['trials']} trials, {r['epochs']} trial-epochs "
                      f"({r['wall_s']} s) | in-process: best {s['best']:.4f} at epoch 27 "
                      f"{s['final_best']:.4f}, {s['epochs']} trial-epochs", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"(c) through the driver, max_concurrent_trials {a.concurrency}, median [q1, q3]")
    results = {"seeds": a.driver, "concurrency": a.concurrency, "runs": runs, "summary": {}}
    for alg in ("bohb", "random"):
        rs = [r for r in runs if r["alg"] == alg]
        row = {}
        for k in ("best", "final_best", "epochs"):
            xs = [r[k] for r in rs]
            row[k] = summary(xs) if len(xs) > 1 else {"median": xs[0], "q1": xs[0], "q3": xs[0]}
        row["at_ceiling"] = sum(r["best"] >= table.best_possible() - 1e-9 for r in rs)
        results["summary"][alg] = row
        print(f"  {alg:6s} best {row['best']['median']:.4f} [{row['best']['q1']:.4f}, "
              f"{row['best']['q3']:.4f}], {row['at_ceiling']}/{len(rs)} at the ceiling, at "
              f"epoch 27 {row['final_best']['median']:.4f}, trial-epochs "
              f"{row['epochs']['median']:g} [{row['epochs']['q1']:g}, {row['epochs']['q3']:g}]")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--table", default=os.path.join(HERE, "digits-curves.json"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--hb-iters", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("--driver", type=int, default=0,
                    help="(c) only: run bohb and random + hyperband through tune, this many seeds")
    ap.add_argument("--concurrency", type=int, default=4,
                    help="(c): the experiments' max_concurrent_trials")
    ap.add_argument("--optuna-alone", action="store_true",
                    help="(d) only: Optuna's TPESampler alone on the lookup")
    ap.add_argument("--no-optuna", action="store_true",
                    help="(a) and (b) without tune_optuna's TPESampler (minutes of Optuna)")
    ap.add_argument("--hartmann", action="store_true",
                    help="(e) only: bohb vs random + HyperBand on multi-fidelity Hartmann-6")
    a = ap.parse_args()
    table = Table(a.table)
    if a.driver:
        return driver_main(a, table)
    if a.hartmann:
        return hartmann_main(a)
    if a.optuna_alone:
        return optuna_alone_main(a, table)
    exe = os.path.join(a.build, "bench", "tune_bench_digits")
    runs = {"tpe": [], "random": [], "tune_optuna TPESampler": []}
    out = subprocess.run([exe, "search", a.table, str(a.seeds), str(a.trials)], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        r = json.loads(line)
        runs[r["alg"]].append(r["best"])
    out = subprocess.run([exe, "hyperband", a.table, str(a.seeds), str(a.hb_iters)], check=True,
                         capture_output=True, text=True).stdout
    hb = {}
    for line in out.splitlines():
        r = json.loads(line)
        hb.setdefault(r["alg"], []).append(r)
    report(a, table, runs, hb)
    if a.no_optuna:
        return 0
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in range(a.seeds):
        runs["tune_optuna TPESampler"].append(tune_optuna_run(optuna, table, seed, a.trials))
        print(f"tune_optuna: seed {seed} done", file=sys.stderr, flush=True)
        if seed >= 1:
            report(a, table, runs, hb)


if __name__ == "__main__":
    sys.exit(main())
