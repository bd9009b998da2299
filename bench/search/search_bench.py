#!/usr/bin/python3
"""Native TPE vs Optuna's TPESampler vs native random search, and suggestion latency.

Simple regret (best value found - the function's minimum) after 50 and 100 sequential trials on
Branin (2-d) and Hartmann-6 (6-d), over SEEDS seeds each, printed as median [q1, q3]; Optuna's
TPESampler both alone (study.optimize) and through tune_optuna's Searcher given the ops the
driver sends (in-process, so that Optuna is imported once), and whether the two agree; then the
time one suggestion takes with 100 and 1,000 finished trials behind it (2-d Branin space, the
same history for both, Optuna's study in memory).

Run with the system Python (Debian's python3-optuna; `scripts/setup.sh --bench` installs it):
    nice -n 10 /usr/bin/python3 bench/search/search_bench.py --build build [--seeds 20]
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BRANIN_MIN = 0.397887357729738
HARTMANN6_MIN = -3.32236801141551
ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
     [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
     [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
     [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def branin(c):
    x1, x2 = c["x1"], c["x2"]
    b, cc, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + cc * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def hartmann6(c):
    x = [c[f"x{j + 1}"] for j in range(6)]
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6)))
                for i in range(4))


FUNCTIONS = {
    "branin": (branin, {"x1": (-5.0, 10.0), "x2": (0.0, 15.0)}, BRANIN_MIN),
    "hartmann6": (hartmann6, {f"x{j + 1}": (0.0, 1.0) for j in range(6)}, HARTMANN6_MIN),
}


def optuna_regret(optuna, fn, seed, trials):
    f, box, fmin = FUNCTIONS[fn]
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(lambda t: f({k: t.suggest_float(k, lo, hi) for k, (lo, hi) in box.items()}),
                   n_trials=trials)
    best, out = math.inf, []
    for t in study.trials:
        best = min(best, t.value)
        out.append(best - fmin)
    return out


def tune_optuna_regret(optuna, fn, seed, trials):
    """Optuna's TPESampler behind tune_optuna: the space as the driver sends it, ask/tell
    through tune_optuna's Searcher (its space mapping and bookkeeping)."""
    sys.path.insert(0, os.path.join(ROOT, "lib", "helpers", "python"))
    from tune_optuna.searcher import Searcher
    f, box, fmin = FUNCTIONS[fn]
    s = Searcher(optuna, "TPESampler", {})
    s.init({"op": "init", "space": {k: {"uniform": [lo, hi]} for k, (lo, hi) in box.items()},
            "metric": "loss", "mode": "min", "seed": seed, "state": None})
    best, out = math.inf, []
    for i in range(trials):
        tid = "%05d" % i
        cfg = s.suggest(tid)
        v = f(cfg)
        s.complete(tid, {"loss": v, "training_iteration": 1}, "TERMINATED", cfg)
        best = min(best, v)
        out.append(best - fmin)
    return out


def summary(values):
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{med:.3g} [{q1:.3g}, {q3:.3g}]"


def optuna_latency(optuna, history, reps):
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial
    box = FUNCTIONS["branin"][1]
    dists = {k: FloatDistribution(lo, hi) for k, (lo, hi) in box.items()}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    for h in history:
        study.add_trial(create_trial(params=h["config"], distributions=dists, value=h["value"]))
    elapsed = cpu = 0.0
    for i in range(reps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        trial = study.ask(dists)
        if i > 0:  # the first is a warm-up
            elapsed += time.perf_counter() - t0
            cpu += time.process_time() - c0
        study.tell(trial, state=TrialState.FAIL)  # keeps the history as it was
    return 1e3 * elapsed / reps, 1e3 * cpu / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory holding bench/tune_bench_tpe")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--json", help="also write the raw figures to this file")
    args = ap.parse_args()
    try:
        import optuna
    except ImportError:
        sys.exit("search_bench: needs Debian's python3-optuna (scripts/setup.sh --bench)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    binary = os.path.join(args.build, "bench", "tune_bench_tpe")
    checkpoints = [n for n in (50, 100) if n <= args.trials]

    t0 = time.time()
    out = subprocess.run([binary, "regret", str(args.seeds), str(args.trials)], check=True,
                         capture_output=True, text=True).stdout
    runs = {}
    for line in out.splitlines():
        r = json.loads(line)
        runs.setdefault((r["fn"], "native " + r["alg"]), []).append(r["regret"])
    native_s = time.time() - t0
    t0 = time.time()
    for fn in FUNCTIONS:
        runs[(fn, "optuna tpe")] = [optuna_regret(optuna, fn, s, args.trials)
                                    for s in range(args.seeds)]
    optuna_s = time.time() - t0
    t0 = time.time()
    for fn in FUNCTIONS:
        runs[(fn, "tune_optuna tpe")] = [tune_optuna_regret(optuna, fn, s, args.trials)
                                         for s in range(args.seeds)]
    tune_optuna_s = time.time() - t0
    same = {fn: sum(a == b for a, b in zip(runs[(fn, "optuna tpe")], runs[(fn, "tune_optuna tpe")]))
            for fn in FUNCTIONS}

    import numpy
    print(f"optuna {optuna.__version__}, numpy {numpy.__version__}, python "
          f"{sys.version.split()[0]}; {args.seeds} seeds; native {native_s:.1f} s, "
          f"optuna {optuna_s:.1f} s, tune_optuna {tune_optuna_s:.1f} s in all")
    print("seeds whose regret curve through tune_optuna is Optuna alone's, trial for trial: " +
          ", ".join(f"{fn} {n}/{args.seeds}" for fn, n in same.items()))
    algs = ("native tpe", "optuna tpe", "tune_optuna tpe", "native random",
            "native tpe normalised")
    print(f"{'function':10} {'trials':>6}  " + " ".join(f"{a:24}" for a in algs))
    table = {}
    for fn in FUNCTIONS:
        for n in checkpoints:
            cells = []
            for alg in algs:
                vals = [r[n - 1] for r in runs[(fn, alg)]]
                table[f"{fn}/{alg}/{n}"] = vals
                cells.append(f"{summary(vals):24}")
            print(f"{fn:10} {n:6}  " + " ".join(cells))

    rng = random.Random(1)
    box = FUNCTIONS["branin"][1]
    latency = {}
    for n, reps in ((100, 200), (1000, 50)):
        history = []
        for _ in range(n):
            c = {k: rng.uniform(lo, hi) for k, (lo, hi) in box.items()}
            history.append({"config": c, "value": branin(c)})
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(history, fh)
        try:
            native = json.loads(subprocess.run([binary, "latency", fh.name, str(reps)], check=True,
                                               capture_output=True, text=True).stdout)
        finally:
            os.unlink(fh.name)
        wall, cpu = optuna_latency(optuna, history, max(reps // 5, 10))
        latency[n] = {"native_ms": native["ms_per_suggest"],
                      "native_cpu_ms": native["cpu_ms_per_suggest"],
                      "optuna_ms": wall, "optuna_cpu_ms": cpu}
        print(f"latency, 2-d, {n:5} finished trials, ms per suggestion (wall / cpu): native tpe "
              f"{native['ms_per_suggest']:.3f} / {native['cpu_ms_per_suggest']:.3f}, "
              f"optuna tpe {wall:.2f} / {cpu:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"seeds": args.seeds, "trials": args.trials, "optuna": optuna.__version__,
                       "regret": table, "latency": latency,
                       "tune_optuna_identical_seeds": same}, fh)


if __name__ == "__main__":
    main()
