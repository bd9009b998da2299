#!/usr/bin/python3
"""asha against Optuna's SuccessiveHalvingPruner on the digits curves (docs/BENCHMARKS.md):
replays a seed's cached curves (run.py's scratch dir) through each rule, in Python, and counts
the trial-epochs, the budget each trial got, the best value reached and when FIFO's best was
reached.

Rules (max_t 27, grace 1; rungs at rf^k below max_t: rf 3 -> 1, 3, 9; rf 4 -> 1, 4, 16):
  ray      Ray's AsyncHyperBandScheduler, as tune's asha: stop if the value is strictly below the
           (1 - 1/rf) quantile (numpy, linear interpolation) of the *other* trials' values at the
           rung; an empty rung stops nobody.
  ray_le   the same, but a value equal to the cutoff stops too (how much ties matter).
  optuna   Optuna 3.1's SuccessiveHalvingPruner (min_resource 1, the same reduction_factor): go
           on only if the value is >= the k-th best of the rung's values *including its own*,
           k = max(1, n // rf).
Orders: `seq` runs the trials one at a time in trial order (as the benchmark's Optuna study);
`c2` simulates two at a time, each epoch lasting half the measured seconds (as the tune runs);
`c2r` (--timings N) the same with every epoch's duration times a random lognormal factor
(sigma 1), N timings a seed: which trial reports first is noise in real runs.
The `ray seq` and `optuna seq` counts at rf 3 equal the tune asha and Optuna runs of the
benchmark of 2026-11-24 on every seed (results-2026-11-24.json): the replay is the same decisions.

Per seed (default): each rule's trial-epochs, best, budgets and rung decisions.
--summary: per rule, order and rf, medians [q1, q3] over the seeds of trial-epochs, of FIFO's
best - best (FIFO's best: the highest value of any of the seed's 60 curves), of trial-epochs
until FIFO's best, and how many seeds meet the goal: (a) within 0.002 of FIFO's best, (b) at
most 1/5 of FIFO's 1,620 trial-epochs, (c) both; and seeds where asha is at least as good as
Optuna on both counts. --json writes the per-seed figures.
--check-optuna: the `optuna seq` replay against Optuna's own pruner (run.py's study).
--check-tune: the `ray` rule applied in the order tune handled the results of run.py's asha
runs (`run.py --methods asha [--rf 4]`, same scratch dir) against what tune recorded.

    /usr/bin/python3 bench/schedulers/asha_trace.py --scratch /tmp/tune-bench-schedulers --seeds 4 6
    /usr/bin/python3 bench/schedulers/asha_trace.py --summary --rf 3 4 --seeds $(seq 1 30)
"""
import argparse
import datetime
import heapq
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import objective  # noqa: E402
import run  # noqa: E402

MAX_T, TRIALS = 27, 60
GAP, BUDGET = 0.002, MAX_T * TRIALS // 5  # the goal: within 0.002 of FIFO's best, <= 324
ORDERS = (("seq", 1), ("c2", 2))


def rungs_of(rf):
    """Milestones grace * rf^k below max_t (grace 1), as asha's single bracket and Optuna's
    pruner with min_resource 1 place them (a trial stops at max_t anyway)."""
    out, m = [], 1
    while m < MAX_T:
        out.append(m)
        m *= rf
    return tuple(out)


class Rule:
    """One rule's rung records; decide(trial, epoch, value) -> True to go on."""

    def __init__(self, kind, rf):
        self.kind, self.rf = kind, rf
        self.rungs = {m: {} for m in rungs_of(rf)}
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
            k = max(1, len(values) // self.rf)
            bar = values[-k]
            go = value >= bar
        else:
            bar = (float(np.nanpercentile(others, (1 - 1 / self.rf) * 100)) if others else None)
            go = bar is None or (value > bar if self.kind == "ray_le" else value >= bar)
        self.log.append((trial, epoch, value, bar, len(others), go))
        return go


def simulate(kind, order, curves, concurrency, rf=3, scale=0.5, rng=None):
    """Runs the trials in `order` (keys of `curves`) through one rule; returns (values in the
    order reported, {trial: epochs}, rule). With `rng` (a numpy Generator), every epoch's
    duration is also multiplied by a lognormal factor (sigma 1): a random timing."""
    rule = Rule(kind, rf)

    def secs(k, epoch):
        return curves[k][epoch][1] * scale * (rng.lognormal(0.0, 1.0) if rng else 1.0)

    done, values = {}, []
    now, queue, events = 0.0, list(enumerate(order)), []

    def start(at):
        if queue:
            i, k = queue.pop(0)
            heapq.heappush(events, (at + secs(k, 0), i, k, 1))

    for _ in range(concurrency):
        start(now)
    while events:
        now, i, k, epoch = heapq.heappop(events)
        value = curves[k][epoch - 1][0]
        values.append(value)
        if rule.decide(i, epoch, value):
            heapq.heappush(events, (now + secs(k, epoch), i, k, epoch + 1))
        else:
            done[i] = epoch
            start(now)
    return values, done, rule


def budgets(done):
    """How many trials got each number of epochs."""
    out = {}
    for e in done.values():
        out[e] = out.get(e, 0) + 1
    return dict(sorted(out.items()))


def load_seed(scratch, seed):
    """(curves, trial order as curve keys) of one seed from run.py's scratch dir."""
    with open(os.path.join(scratch, f"curves-s{seed}.json")) as f:
        curves = json.load(f)
    exp = os.path.join(scratch, f"sample-s{seed}", "storage", f"sample-s{seed}")
    configs = run.trials_of(exp)
    order = [objective.key(configs[t][0]) for t in sorted(configs)]
    if len(order) != TRIALS or any(k not in curves for k in order):
        raise SystemExit(f"seed {seed}: {exp} does not hold the {TRIALS} configs of the curves")
    return curves, order


def figures(values, target):
    """best, gap to target, trial-epochs, trial-epochs until the best so far reaches target,
    and whether the goal's two criteria hold."""
    r = run.figures(values, target)
    r["gap"] = max(0.0, r["gap"])
    r["acc_ok"] = r["gap"] <= GAP + 1e-12
    r["budget_ok"] = r["epochs"] <= BUDGET
    r["both"] = r["acc_ok"] and r["budget_ok"]
    return r


def per_seed(scratch, seeds, rfs, timings, kinds=("ray", "optuna")):
    """{seed: {"fifo_best": x, f"{kind} {order} rf{rf}": figures,
    f"{kind} c2r rf{rf}": [figures of `timings` random timings, two at a time]}}."""
    out = {}
    for seed in seeds:
        curves, order = load_seed(scratch, seed)
        target = max(p[0] for k in order for p in curves[k])
        res = {"fifo_best": target}
        for rf in rfs:
            for kind in kinds:
                for name, conc in ORDERS:
                    values, _, _ = simulate(kind, order, curves, conc, rf)
                    res[f"{kind} {name} rf{rf}"] = figures(values, target)
                # The same `timings` random timings (generator seeds 0..) for every rule.
                res[f"{kind} c2r rf{rf}"] = [
                    figures(simulate(kind, order, curves, 2, rf,
                                     rng=np.random.default_rng([seed, j]))[0], target)
                    for j in range(timings)]
        out[seed] = res
    return out


def spread(xs, fmt):
    """median [q1, q3] (numpy's linear quantiles) of the values that are not None."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    q1, med, q3 = np.percentile(xs, [25, 50, 75])
    return f"{fmt(med)} [{fmt(q1)}, {fmt(q3)}]"


def summary(res, rfs):
    seeds = sorted(res)
    n = len(seeds)
    ep, gap = (lambda x: f"{x:.0f}"), (lambda x: f"{x:.4f}")
    for name, _ in ORDERS:
        print(f"\n{name}: {n} seeds ({seeds[0]}–{seeds[-1]}), 60 trials, max_t 27; "
              f"median [q1, q3] over the seeds\n")
        print("| rule | rf | trial-epochs | FIFO best − best | until FIFO's best (reached) "
              f"| (a) within {GAP} | (b) ≤ {BUDGET} trial-epochs | (c) both |")
        print("|---|---|---|---|---|---|---|---|")
        for rf in rfs:
            for kind in ("ray", "optuna"):
                rs = [res[s][f"{kind} {name} rf{rf}"] for s in seeds]
                reached = [r["reach"] for r in rs if r["reach"] is not None]
                print(f"| {'asha' if kind == 'ray' else 'optuna_sha'} | {rf} "
                      f"| {spread([r['epochs'] for r in rs], ep)} "
                      f"| {spread([r['gap'] for r in rs], gap)} "
                      f"| {spread(reached, ep)} ({len(reached)}/{n}) "
                      + "".join(f"| {sum(r[c] for r in rs)}/{n} "
                                for c in ("acc_ok", "budget_ok", "both")) + "|")
        print(f"\n{name}, paired per seed (asha against Optuna at the same rf)\n")
        print("| rf | asha as accurate or more | asha ≤ Optuna's trial-epochs "
              "| both (asha at least as good on both counts) | both criteria: asha only "
              "| Optuna only | both rules | neither |")
        print("|---|---|---|---|---|---|---|---|")
        for rf in rfs:
            pairs = [(res[s][f"ray {name} rf{rf}"], res[s][f"optuna {name} rf{rf}"])
                     for s in seeds]
            acc = sum(a["best"] >= o["best"] for a, o in pairs)
            cheap = sum(a["epochs"] <= o["epochs"] for a, o in pairs)
            both = sum(a["best"] >= o["best"] and a["epochs"] <= o["epochs"] for a, o in pairs)
            cells = [sum(a["both"] == x and o["both"] == y for a, o in pairs)
                     for x, y in ((True, False), (False, True), (True, True), (False, False))]
            print(f"| {rf} | {acc}/{n} | {cheap}/{n} | {both}/{n} | "
                  + " | ".join(f"{c}/{n}" for c in cells) + " |")
    seed_table(res, rfs)


def seed_table(res, rfs):
    """Per seed, seq order: each rule's gap to FIFO's best and trial-epochs."""
    print("\nper seed, seq order: FIFO best; then per rule and rf: FIFO best − best / "
          "trial-epochs (* meets both)\n")
    cols = [f"{k} seq rf{rf}" for rf in rfs for k in ("ray", "optuna")]
    print("| seed | FIFO best | " + " | ".join(
        c.replace("ray", "asha").replace("optuna", "optuna_sha").replace(" seq", "") for c in cols)
        + " |")
    print("|---" * (len(cols) + 2) + "|")
    for s in sorted(res):
        cells = [f"{res[s][c]['gap']:.4f} / {res[s][c]['epochs']}"
                 + (" *" if res[s][c]["both"] else "") for c in cols]
        print(f"| {s} | {res[s]['fifo_best']:.4f} | " + " | ".join(cells) + " |")


def summary_random(res, rfs):
    """The random-timing tables: every seed's `timings` runs two at a time."""
    seeds = sorted(res)
    n = len(seeds)
    t = len(res[seeds[0]][f"ray c2r rf{rfs[0]}"])
    ep, gap = (lambda x: f"{x:.0f}"), (lambda x: f"{x:.4f}")
    print(f"\nc2 with random timing: {n} seeds x {t} timings (each epoch's duration times a "
          f"lognormal factor, sigma 1); median [q1, q3] over all {n * t} runs\n")
    print(f"| rule | rf | trial-epochs | FIFO best − best | runs (a) within {GAP} "
          f"| runs (b) ≤ {BUDGET} | runs (c) both | seeds where most runs meet both |")
    print("|---|---|---|---|---|---|---|---|")
    for rf in rfs:
        for kind in ("ray", "optuna"):
            per = [res[s][f"{kind} c2r rf{rf}"] for s in seeds]
            rs = [r for runs in per for r in runs]
            print(f"| {'asha' if kind == 'ray' else 'optuna_sha'} | {rf} "
                  f"| {spread([r['epochs'] for r in rs], ep)} "
                  f"| {spread([r['gap'] for r in rs], gap)} "
                  + " ".join(f"| {sum(r[c] for r in rs) / len(rs):.0%}"
                             for c in ("acc_ok", "budget_ok", "both"))
                  + f" | {sum(2 * sum(r['both'] for r in runs) > len(runs) for runs in per)}/{n} |")
    print("\nc2 with random timing, paired per seed (asha against Optuna at the same rf)\n")
    print("| rf | asha meets both in at least as many runs | in more runs | in fewer runs "
          "| asha's median trial-epochs ≤ Optuna's |")
    print("|---|---|---|---|---|")
    for rf in rfs:
        both = [(sum(r["both"] for r in res[s][f"ray c2r rf{rf}"]),
                 sum(r["both"] for r in res[s][f"optuna c2r rf{rf}"])) for s in seeds]
        cheap = sum(np.median([r["epochs"] for r in res[s][f"ray c2r rf{rf}"]])
                    <= np.median([r["epochs"] for r in res[s][f"optuna c2r rf{rf}"]])
                    for s in seeds)
        print(f"| {rf} | {sum(a >= o for a, o in both)}/{n} | {sum(a > o for a, o in both)}/{n} "
              f"| {sum(a < o for a, o in both)}/{n} | {cheap}/{n} |")


def details(scratch, seeds, rf, verbose):
    """The per-seed trace: trial-epochs, best, budgets, rung decisions."""
    for seed in seeds:
        curves, order = load_seed(scratch, seed)
        print(f"seed {seed} (rf {rf}, rungs {rungs_of(rf)}):")
        for kind in ("ray", "ray_le", "optuna"):
            for name, conc in ORDERS:
                values, done, rule = simulate(kind, order, curves, conc, rf)
                # Per rung: values judged / went on; ties: went on with a value equal to the
                # cutoff (ray only: optuna's bar is often the value itself).
                rungs = " ".join(
                    f"{m}:{sum(1 for x in rule.log if x[1] == m and x[5])}/"
                    f"{sum(1 for x in rule.log if x[1] == m)}" for m in rungs_of(rf))
                ties = sum(1 for x in rule.log if x[5] and x[3] is not None and x[2] == x[3])
                print(f"  {kind:7} {name:4} trial-epochs {len(values):4}  best {max(values):.4f}"
                      f"  epochs per trial {budgets(done)}  went on/judged {rungs}"
                      + (f"  went on at a tie {ties}" if kind != "optuna" else ""))
                if verbose:
                    for t, e, v, bar, n, go in rule.log:
                        print(f"    trial {t:2} rung {e}: {v:.4f} vs "
                              f"{'—' if bar is None else f'{bar:.4f}'} ({n} others) "
                              f"{'go on' if go else 'STOP'}")


def check_optuna(scratch, seeds, rfs):
    """Runs Optuna's own SuccessiveHalvingPruner (run.py's study, one trial at a time) on each
    seed and rf and compares its trial-epochs and values with the `optuna seq` replay."""
    bad = 0
    for seed in seeds:
        curves, order = load_seed(scratch, seed)
        for rf in rfs:
            real = run.optuna_method(seed, "optuna_sha", [json.loads(k) for k in order], curves,
                                     rf)["values"]
            mine, _, _ = simulate("optuna", order, curves, 1, rf)
            same = real == mine
            bad += not same
            print(f"seed {seed} rf {rf}: Optuna {len(real)} trial-epochs, replay {len(mine)}"
                  f"{'' if same else '  DIFFERENT'}")
    return 1 if bad else 0


def check_tune(scratch, seeds, rf):
    """Applies the ray rule to the results of run.py's tune asha run of each seed in the order
    tune handled them (its tune.log: one checkpoint line per result, as replay_trial.py
    checkpoints every epoch) and compares the epochs each trial got with tune's result.json."""
    bad = 0
    line = re.compile(r"trial trial_(\d+)_[^:]*: checkpoint checkpoint_\d+ at iteration (\d+)")
    for seed in seeds:
        name = f"asha-s{seed}" + (f"-rf{rf}" if rf != 3 else "")
        exp = os.path.join(scratch, name, "storage", name)
        trials = run.trials_of(exp)
        value = {(t, r["training_iteration"]): r["val_acc"] for t, (_, rs) in trials.items()
                 for r in rs}
        with open(os.path.join(exp, "tune.log")) as f:
            handled = [(m.group(1), int(m.group(2))) for m in line.finditer(f.read())]
        rule, stopped_at = Rule("ray", rf), {}
        for t, epoch in handled:
            if (t, epoch) not in value:  # handled but not recorded: a mismatch
                stopped_at[t] = -1
            elif t not in stopped_at and not rule.decide(int(t), epoch, value[(t, epoch)]):
                stopped_at[t] = epoch
        differ = {t: (len(rs), stopped_at.get(t)) for t, (_, rs) in trials.items()
                  if len(rs) != stopped_at.get(t)}
        with open(os.path.join(scratch, name + ".epochs.jsonl")) as f:
            ran = sum(1 for _ in f)
        bad += bool(differ) or len(handled) != len(value)
        print(f"seed {seed} rf {rf}: tune recorded {len(value)} trial-epochs (ran {ran}); "
              f"the rule in tune's order: {sum(stopped_at.values())}"
              + (f"  DIFFERENT (trial: tune, rule) {differ}" if differ else ""))
    return 1 if bad else 0


def write_json(a, res):
    """The per-seed figures, one line per seed and rule; the random timings' figures as lists
    (best, trial-epochs, until FIFO's best, one entry per timing)."""
    head = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "seeds": a.seeds, "rf": a.rf, "timings": a.timings,
            "goal": {"gap": GAP, "budget": BUDGET}, "rules": {"ray": "asha", "optuna":
                                                              "optuna_sha"}}
    keep = ("best", "epochs", "reach")

    def short(x):  # accuracies are multiples of 1/540: 6 decimals tell them apart
        return round(x, 6) if isinstance(x, float) else x

    with open(a.json, "w") as f:
        f.write(json.dumps(head)[:-1] + ', "per_seed": {\n')
        for i, seed in enumerate(sorted(res)):
            rows = [f' "fifo_best": {short(res[seed]["fifo_best"])}']
            for k, v in res[seed].items():
                if isinstance(v, list):
                    v = {x: [short(r[x]) for r in v] for x in keep}
                elif isinstance(v, dict):
                    v = {x: short(v[x]) for x in keep}
                else:
                    continue
                rows.append(f" {json.dumps(k)}: {json.dumps(v)}")
            f.write(f'"{seed}": {{\n' + ",\n".join(rows) + "}"
                    + (",\n" if i + 1 < len(res) else "\n"))
        f.write("}}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scratch", default="/tmp/tune-bench-schedulers")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7])
    ap.add_argument("--rf", type=int, nargs="+", default=[3], choices=[3, 4],
                    help="reduction factor(s); rungs at 1, 3, 9 (3) or 1, 4, 16 (4)")
    ap.add_argument("--summary", action="store_true", help="print the markdown tables")
    ap.add_argument("--timings", type=int, default=20, metavar="N",
                    help="random timings per seed, rule and rf for the c2r tables (0: none)")
    ap.add_argument("--json", metavar="PATH", help="write the per-seed figures here")
    ap.add_argument("--verbose", action="store_true", help="print every rung decision")
    ap.add_argument("--check-optuna", action="store_true",
                    help="compare the optuna replay with Optuna's own pruner (seq order)")
    ap.add_argument("--check-tune", action="store_true",
                    help="compare run.py's tune asha runs with the rule in tune's own order")
    a = ap.parse_args()
    if a.check_tune:
        return max(check_tune(a.scratch, a.seeds, rf) for rf in a.rf)
    if a.check_optuna:
        return check_optuna(a.scratch, a.seeds, a.rf)
    if not (a.summary or a.json):
        for rf in a.rf:
            details(a.scratch, a.seeds, rf, a.verbose)
        return
    res = per_seed(a.scratch, a.seeds, a.rf, a.timings)
    if a.summary:
        summary(res, a.rf)
        if a.timings:
            summary_random(res, a.rf)
    if a.json:
        write_json(a, res)


if __name__ == "__main__":
    sys.exit(main())
