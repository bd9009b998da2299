#!/usr/bin/python3
"""Why asha spends more trial-epochs than Optuna's SuccessiveHalvingPruner on the digits curves
(docs/BENCHMARKS.md): replays a seed's cached curves (run.py's scratch dir) through each rule,
in Python, and counts the trial-epochs and the budget each trial got.

Rules (rungs at 1, 3, 9; max_t 27; reduction factor 3):
  ray      Ray's AsyncHyperBandScheduler, as tune's asha: stop if the value is strictly below the
           (1 - 1/rf) quantile (numpy, linear interpolation) of the *other* trials' values at the
           rung; an empty rung stops nobody.
  ray_le   the same, but a value equal to the cutoff stops too (how much ties matter).
  optuna   Optuna 3.1's SuccessiveHalvingPruner: go on only if the value is >= the k-th best of
           the rung's values *including its own*, k = max(1, n // rf).
Orders: `seq` runs the trials one at a time in trial order (as the benchmark's Optuna study);
`c2` simulates two at a time, each epoch lasting half the measured seconds (as the tune runs).
The `ray seq` and `optuna seq` counts equal the tune asha and Optuna runs of the benchmark of
2026-11-24 on every seed (results-2026-11-24.json): the replay is the same decisions.

    /usr/bin/python3 bench/schedulers/asha_trace.py --scratch /tmp/tune-bench-schedulers --seeds 4 6
"""
import argparse
import heapq
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import objective  # noqa: E402
import run  # noqa: E402

RUNGS, MAX_T, RF = (1, 3, 9), 27, 3


class Rule:
    """One rule's rung records; decide(trial, epoch, value) -> True to go on."""

    def __init__(self, kind):
        self.kind = kind
        self.rungs = {m: {} for m in RUNGS}
        self.log = []  # (trial, rung, value, cutoff or threshold, n other values, went on)

    def decide(self, trial, epoch, value):
        if epoch >= MAX_T:
            return False
        if epoch not in self.rungs:
            return True
        rec = self.rungs[epoch]
        others = list(rec.values())
        rec[trial] = value
        if self.kind == "optuna":
            values = sorted(others + [value])
            k = max(1, len(values) // RF)
            bar = values[-k]
            go = value >= bar
        else:
            bar = float(np.nanpercentile(others, (1 - 1 / RF) * 100)) if others else None
            go = bar is None or (value > bar if self.kind == "ray_le" else value >= bar)
        self.log.append((trial, epoch, value, bar, len(others), go))
        return go


def simulate(kind, order, curves, concurrency, scale=0.5):
    """Runs the trials in `order` (keys of `curves`) through one rule; returns (values in the
    order reported, {trial: epochs}, rule)."""
    rule = Rule(kind)
    done, values = {}, []
    now, queue, events = 0.0, list(enumerate(order)), []

    def start(at):
        if queue:
            i, k = queue.pop(0)
            heapq.heappush(events, (at + curves[k][0][1] * scale, i, k, 1))

    for _ in range(concurrency):
        start(now)
    while events:
        now, i, k, epoch = heapq.heappop(events)
        value = curves[k][epoch - 1][0]
        values.append(value)
        if rule.decide(i, epoch, value):
            heapq.heappush(events, (now + curves[k][epoch][1] * scale, i, k, epoch + 1))
        else:
            done[i] = epoch
            start(now)
    return values, done, rule


def budgets(done):
    """How many trials got 1, 3, 9 and 27 epochs (other counts: a trial that ended elsewhere)."""
    out = {}
    for e in done.values():
        out[e] = out.get(e, 0) + 1
    return dict(sorted(out.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scratch", default="/tmp/tune-bench-schedulers")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7])
    ap.add_argument("--verbose", action="store_true", help="print every rung decision")
    a = ap.parse_args()
    for seed in a.seeds:
        with open(os.path.join(a.scratch, f"curves-s{seed}.json")) as f:
            curves = json.load(f)
        exp = os.path.join(a.scratch, f"sample-s{seed}", "storage", f"sample-s{seed}")
        configs = run.trials_of(exp)
        order = [objective.key(configs[t][0]) for t in sorted(configs)]
        print(f"seed {seed}:")
        for kind in ("ray", "ray_le", "optuna"):
            for name, conc in (("seq", 1), ("c2", 2)):
                values, done, rule = simulate(kind, order, curves, conc)
                # Per rung: values judged / went on; ties: went on with a value equal to the
                # cutoff (ray only: optuna's bar is often the value itself).
                rungs = " ".join(
                    f"{m}:{sum(1 for x in rule.log if x[1] == m and x[5])}/"
                    f"{sum(1 for x in rule.log if x[1] == m)}" for m in RUNGS)
                ties = sum(1 for x in rule.log if x[5] and x[3] is not None and x[2] == x[3])
                print(f"  {kind:7} {name:4} trial-epochs {len(values):4}  best {max(values):.4f}"
                      f"  epochs per trial {budgets(done)}  went on/judged {rungs}"
                      + (f"  went on at a tie {ties}" if kind != "optuna" else ""))
                if a.verbose:
                    for t, e, v, bar, n, go in rule.log:
                        print(f"    trial {t:2} rung {e}: {v:.4f} vs "
                              f"{'—' if bar is None else f'{bar:.4f}'} ({n} others) "
                              f"{'go on' if go else 'STOP'}")


if __name__ == "__main__":
    main()
