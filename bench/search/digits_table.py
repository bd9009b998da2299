#!/usr/bin/python3
"""Builds the digits table of the search benchmarks from the curve caches of the scheduler
benchmark (bench/schedulers/run.py writes <scratch>/curves-s<seed>.json: for each of a seed's
60 random configs of configs/asha_digits.yaml's space, the 27-epoch val_acc curve computed with
the example's own training loop, objective.py). The table lists them all; a searcher's config is
then scored with the curve of the nearest listed config with the same hidden and batch_size
(nearest in log10 alpha, log10 lr): a lookup instead of training.

    /usr/bin/python3 bench/search/digits_table.py OUT.json CACHE.json [CACHE.json ...]
        [--check N]   recompute N listed curves with objective.py and compare (costs training)
"""
import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "schedulers"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("caches", nargs="+")
    ap.add_argument("--check", type=int, default=0)
    a = ap.parse_args()
    curves = {}
    for path in a.caches:
        with open(path) as f:
            curves.update(json.load(f))
    rows = []
    for key in sorted(curves):
        c = json.loads(key)
        accs = [p[0] for p in curves[key]]
        if len(accs) != 27 or not all(0 <= x <= 1 for x in accs):
            sys.exit(f"digits_table: bad curve for {key}")
        rows.append({"hidden": c["hidden"], "batch_size": c["batch_size"], "alpha": c["alpha"],
                     "lr": c["lr"], "val_acc": [round(x, 6) for x in accs]})
    if a.check:
        import objective
        for r in random.Random(0).sample(rows, a.check):
            got = [round(x, 6) for x, _ in objective.curve(r)]
            print("check", "ok" if got == r["val_acc"] else "DIFFERS", json.dumps(r)[:100])
    with open(a.out, "w") as f:
        json.dump({"epochs": 27, "configs": rows}, f, separators=(",", ":"))
    print(f"{len(rows)} curves")


if __name__ == "__main__":
    main()
