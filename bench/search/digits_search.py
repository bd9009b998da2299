#!/usr/bin/python3
"""Searchers on the digits problem of configs/asha_digits.yaml, from precomputed curves.

(a) Best validation accuracy after 30 and 60 sequential trials (each trained the full 27
    epochs; a trial's value is its epoch-27 val_acc): native `tpe` and `random` (in-process,
    digits_bench.cpp), and Optuna 3.1's TPESampler (defaults, seeded) through `tune_optuna`'s
    Searcher, given the ops the driver sends (in-process: one Optuna import for all seeds).
(b) BOHB + HyperBand vs random + HyperBand: synchronous HyperBand (max_t 27, rf 3), the same
    brackets for both, so the same trial-epochs; best val_acc reported at any epoch.

A config is scored with the curve of the nearest config (same hidden and batch_size, nearest in
log10 alpha, log10 lr) of bench/search/digits-curves.json: 420 curves the scheduler benchmark
computed with the example's own training loop (digits_table.py). Training is replaced by a
lookup, so 20 seeds cost seconds; the problem is the example's, made piecewise constant.
Prints median [q1, q3] per method and writes the raw numbers to --out.

    nice -n 19 /usr/bin/python3 bench/search/digits_search.py --build build --seeds 20 \\
        --out bench/search/digits-results-<date>.json
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--table", default=os.path.join(HERE, "digits-curves.json"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--hb-iters", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    table = Table(a.table)
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
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in range(a.seeds):
        runs["tune_optuna TPESampler"].append(tune_optuna_run(optuna, table, seed, a.trials))
        print(f"tune_optuna: seed {seed} done", file=sys.stderr, flush=True)
        if seed >= 1:
            report(a, table, runs, hb)


if __name__ == "__main__":
    sys.exit(main())
