"""The protocol loop and the space mapping of tune_optuna (see __init__.py)."""
import argparse
import inspect
import json
import math
import os
import pickle
import sys

SHORT = {"tpe": "TPESampler", "cmaes": "CmaEsSampler", "nsgaii": "NSGAIISampler",
         "nsgaiii": "NSGAIIISampler", "qmc": "QMCSampler", "random": "RandomSampler",
         "gp": "GPSampler", "bruteforce": "BruteForceSampler"}
SCALARS = (str, int, float, bool, type(None))


class SpaceError(Exception):
    pass


def flatten_space(space, prefix=""):
    """[(dotted path, kind, args)] for each parameter of tune's param_space, in order."""
    out = []
    for key, val in space.items():
        path = prefix + key
        if isinstance(val, dict) and len(val) == 1 and next(iter(val)) in KINDS:
            kind, args = next(iter(val.items()))
            out.append((path, kind, args))
        elif isinstance(val, dict):
            out.extend(flatten_space(val, path + "."))
    return out


KINDS = {"uniform", "loguniform", "quniform", "qloguniform", "randint", "randn", "lograndint",
         "qrandint", "qlograndint", "qrandn", "choice", "grid_search"}


def distribution(optuna, path, kind, args):
    """(Optuna distribution, its value -> the config value[, the config value -> its value])."""
    d = optuna.distributions
    same = lambda v: v  # noqa: E731

    def rounded(q, integer, lo=None, hi=None):
        def f(v):
            r = round(v / q) * q
            if lo is not None:
                r = min(hi, max(lo, r))
            return int(r) if integer else r
        return f

    def multiples(lo, hi, q):  # the first and last multiple of q in [lo, hi] (tune checked one)
        return -(-lo // q) * q, hi // q * q

    def normal(mean, sd):  # unbounded: Optuna has no normal distribution; mean +- 4 sd
        return d.FloatDistribution(mean - 4 * sd, mean + 4 * sd)

    if kind == "uniform":
        return d.FloatDistribution(args[0], args[1]), same
    if kind == "loguniform":
        return d.FloatDistribution(args[0], args[1], log=True), same
    if kind == "quniform":
        return d.FloatDistribution(args[0], args[1], step=args[2]), same
    if kind == "qloguniform":
        return d.FloatDistribution(args[0], args[1], log=True), rounded(args[2], False)
    if kind == "randint":
        return d.IntDistribution(int(args[0]), int(args[1]) - 1), same
    if kind == "lograndint":
        return d.IntDistribution(int(args[0]), int(args[1]) - 1, log=True), same
    if kind == "qrandint":  # as random search: multiples of q (not lo + k q)
        lo, hi = multiples(int(args[0]), int(args[1]), int(args[2]))
        return d.IntDistribution(lo, hi, step=int(args[2])), same
    if kind == "qlograndint":  # Optuna has no log with a step: log ints rounded to q, kept in range
        q = int(args[2])
        lo, hi = multiples(int(args[0]), int(args[1]), q)
        return d.IntDistribution(lo, hi, log=True), rounded(q, True, lo, hi)
    if kind == "randn":
        return normal(float(args[0]), float(args[1])), same
    if kind == "qrandn":
        return normal(float(args[0]), float(args[1])), rounded(float(args[2]), False)
    if kind == "choice":
        if all(isinstance(v, SCALARS) for v in args):
            return d.CategoricalDistribution(list(args)), same
        return d.CategoricalDistribution(list(range(len(args)))), lambda i: args[i], args.index
    raise SpaceError(f"tune_optuna cannot model {kind} parameter '{path}': use choice")


def set_path(cfg, path, value):
    keys = path.split(".")
    for k in keys[:-1]:
        cfg = cfg.setdefault(k, {})
    cfg[keys[-1]] = value


def lookup(result, metric):
    if not isinstance(result, dict):
        return None
    v = result.get(metric)
    if v is None:  # a nested metric, as written ("val/acc" -> {"val": {"acc": ...}})
        v = result
        for k in metric.split("/"):
            v = v.get(k) if isinstance(v, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def make_sampler(optuna, name, kwargs, seed):
    cls = getattr(optuna.samplers, SHORT.get(name.lower(), name), None)
    if cls is None or not isinstance(cls, type):
        raise SpaceError(f"tune_optuna: no Optuna sampler named '{name}'")
    kwargs = dict(kwargs)
    if "seed" not in kwargs and "seed" in inspect.signature(cls).parameters:
        kwargs["seed"] = seed
    return cls(**kwargs)


class Searcher:
    def __init__(self, optuna, sampler_name, sampler_kwargs):
        self.optuna = optuna
        self.sampler_name = sampler_name
        self.sampler_kwargs = sampler_kwargs
        self.study = None
        self.pending = {}  # trial_id -> (trial number, config)

    def init(self, msg):
        self.metric = msg.get("metric")
        self.params = []
        for path, kind, args in flatten_space(msg["space"]):
            dist, to_value, *back = distribution(self.optuna, path, kind, args)
            self.params.append((path, dist, to_value, back[0] if back else None))
        self.base = strip_params(msg["space"])
        if msg.get("state"):
            with open(os.path.join(msg["state"], "study.pkl"), "rb") as f:
                saved = pickle.load(f)
            self.study, self.pending = saved["study"], saved["pending"]
            return
        sampler = make_sampler(self.optuna, self.sampler_name, self.sampler_kwargs,
                               int(msg.get("seed") or 0))
        direction = "maximize" if msg.get("mode") == "max" else "minimize"
        self.study = self.optuna.create_study(direction=direction, sampler=sampler)

    def suggest(self, trial_id):
        if trial_id in self.pending:  # asked again (a resumed driver): the same config
            return self.pending[trial_id][1]
        trial = self.study.ask({p[0]: p[1] for p in self.params})
        cfg = json.loads(json.dumps(self.base))
        for path, _, to_value, _ in self.params:
            set_path(cfg, path, to_value(trial.params[path]))
        self.pending[trial_id] = (trial.number, cfg)
        return cfg

    def result(self, trial_id, result):
        entry = self.pending.get(trial_id)
        value = lookup(result, self.metric) if self.metric else None
        step = result.get("training_iteration") if isinstance(result, dict) else None
        if entry is None or value is None or not isinstance(step, int) or not math.isfinite(value):
            return
        try:  # only pruners read these; a storage that refuses one is no reason to stop
            frozen = self.study.trials[entry[0]]
            self.study._storage.set_trial_intermediate_value(frozen._trial_id, step, value)
        except Exception:  # noqa: BLE001
            pass

    def complete(self, trial_id, result, status, config=None):
        entry = self.pending.pop(trial_id, None)
        value = lookup(result, self.metric) if self.metric else None
        ok = status == "TERMINATED" and value is not None and math.isfinite(value)
        if entry is None:  # a trial it did not suggest (points_to_evaluate): added as is
            if isinstance(config, dict):
                self.add_trial(config, value if ok else None)
            return
        if ok:
            self.study.tell(entry[0], value)
        else:
            self.study.tell(entry[0], state=self.optuna.trial.TrialState.FAIL)

    def add_trial(self, config, value):
        params, dists = {}, {}
        for path, dist, _, from_value in self.params:
            v = config
            for k in path.split("."):
                v = v.get(k) if isinstance(v, dict) else None
            try:
                params[path] = from_value(v) if from_value else v
            except ValueError:
                return
            dists[path] = dist
        state = self.optuna.trial.TrialState
        try:
            self.study.add_trial(self.optuna.trial.create_trial(
                params=params, distributions=dists, value=value,
                state=state.COMPLETE if value is not None else state.FAIL))
        except (ValueError, TypeError) as e:  # a value outside what Optuna models: left out
            print(f"tune_optuna: a finished trial not added to the study: {e}", file=sys.stderr)

    def save(self, path):
        tmp = os.path.join(path, "study.pkl.tmp")
        with open(tmp, "wb") as f:
            pickle.dump({"study": self.study, "pending": self.pending}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(path, "study.pkl"))


def strip_params(space):
    """The constants of the space (parameters left out), nested as written."""
    out = {}
    for key, val in space.items():
        if isinstance(val, dict) and len(val) == 1 and next(iter(val)) in KINDS:
            continue
        out[key] = strip_params(val) if isinstance(val, dict) else val
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="tune_optuna", description=__doc__)
    ap.add_argument("--sampler", default="TPESampler", help="an optuna.samplers class name")
    ap.add_argument("--sampler-kwargs", default="{}", help="its keyword arguments, as JSON")
    opts = ap.parse_args(argv)
    proto = sys.stdout
    sys.stdout = sys.stderr  # anything printed goes to the log, never into the protocol
    try:
        kwargs = json.loads(opts.sampler_kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        print(f"tune_optuna: --sampler-kwargs: {e}", file=sys.stderr)
        return 2
    import optuna  # noqa: E402 (after the checks: importing it takes a while)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = Searcher(optuna, opts.sampler, kwargs)

    def say(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    for line in sys.stdin:
        msg = json.loads(line)
        op = msg.get("op")
        if op == "init":
            try:
                s.init(msg)
            except (SpaceError, TypeError, ValueError) as e:
                say({"ok": False, "error": str(e)})
                return 1
            say({"ok": True})
        elif op == "suggest":
            say({"config": s.suggest(msg["trial_id"])})
        elif op == "result":
            s.result(msg["trial_id"], msg.get("result"))
        elif op == "complete":
            s.complete(msg["trial_id"], msg.get("result"), msg.get("status"), msg.get("config"))
        elif op == "save":
            s.save(msg["path"])
            say({"saved": msg["path"]})
    return 0
