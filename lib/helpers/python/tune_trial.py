"""tune_trial: the trial side of tune's protocol for Python programs (no dependencies).

`tune run` puts this module on the trial's PYTHONPATH, so `import tune_trial` just works.

Function mode (the default)::

    import tempfile, tune_trial
    cfg = tune_trial.config()
    start = 0
    ckpt = tune_trial.get_checkpoint()          # set when the trial resumes
    if ckpt:
        start = load(ckpt)
    for epoch in range(start, 100):
        loss = train_one_epoch(cfg["lr"])
        with tempfile.TemporaryDirectory() as d:
            save(d)
            tune_trial.report({"loss": loss}, checkpoint_dir=d)

Ray Tune's shapes work too: ``report(metrics, checkpoint=Checkpoint.from_directory(d))``,
``Checkpoint.from_dict(...)`` / ``to_dict()`` / ``as_directory()``, ``get_checkpoint()`` (a
Checkpoint, which is also the path string older code expects) and
``get_context().get_trial_id() / get_trial_name() / get_trial_dir()``.

Step mode (the driver drives the loop): subclass Trainable (setup/step/save_checkpoint/
load_checkpoint/reset_config, as Ray's class API) and call run_trainable(MyTrainable).

NaN and infinite values are written as json.dumps writes them (NaN, Infinity, -Infinity), which
tune accepts. A checkpoint_dir outside the trial dir is copied into it under a
`.staged_checkpoint_*` name (complete before the line naming it is printed); a copy cut short by
a kill is removed the next time the module is imported in that trial dir. Outside tune (no
TUNE_TRIAL_DIR) nothing is copied: the line names checkpoint_dir itself.
"""

import contextlib
import json
import os
import pickle
import re
import shutil
import sys
import tempfile

__all__ = ["config", "trial_dir", "trial_id", "get_checkpoint", "report", "Checkpoint", "get_context",
           "Trainable", "run_trainable"]

_DICT_FILE = "dict_checkpoint.pkl"  # where Checkpoint.from_dict keeps its dict

_counter = 0
_out = sys.stdout  # protocol lines go here; step mode points sys.stdout elsewhere


def config():
    """The trial's config (a dict), from TUNE_CONFIG or TUNE_CONFIG_FILE."""
    text = os.environ.get("TUNE_CONFIG")
    if text is None and os.environ.get("TUNE_CONFIG_FILE"):
        with open(os.environ["TUNE_CONFIG_FILE"]) as f:
            text = f.read()
    return json.loads(text) if text else {}


def trial_dir():
    """Absolute path of the trial's directory (the current directory outside tune)."""
    return os.environ.get("TUNE_TRIAL_DIR") or os.getcwd()


def trial_id():
    return os.environ.get("TUNE_TRIAL_ID", "")


class Checkpoint(str):
    """A checkpoint directory, as Ray's ``Checkpoint``. It is also the directory's path as a
    string, so code written for a plain path (``os.path.join(ckpt, "model.pt")``) keeps
    working."""

    @classmethod
    def from_directory(cls, path):
        """The checkpoint held in directory ``path`` (reported as it is, copied by report())."""
        return cls(os.path.abspath(os.fspath(path)))

    @classmethod
    def from_dict(cls, data):
        """A checkpoint holding ``data`` (any picklable dict), written to a new temporary
        directory (report() copies it into the trial dir and removes the temporary one)."""
        if not isinstance(data, dict):
            raise TypeError("Checkpoint.from_dict takes a dict, got %s" % type(data).__name__)
        d = tempfile.mkdtemp(prefix="tune_dict_checkpoint_")
        with open(os.path.join(d, _DICT_FILE), "wb") as f:
            pickle.dump(data, f)
        ckpt = cls(d)
        ckpt._temporary = True
        return ckpt

    @property
    def path(self):
        """The checkpoint's directory."""
        return str(self)

    def to_dict(self):
        """The dict a checkpoint made by from_dict (or a Trainable's save_checkpoint that
        returned a dict) holds."""
        f = os.path.join(self, _DICT_FILE)
        if not os.path.isfile(f):
            raise ValueError("checkpoint %s holds no dict (it was not made by Checkpoint.from_dict); "
                             "read its files with as_directory()" % self)
        with open(f, "rb") as fh:
            return pickle.load(fh)

    @contextlib.contextmanager
    def as_directory(self):
        """``with ckpt.as_directory() as d:`` the directory itself (never a copy)."""
        yield str(self)

    def to_directory(self, path=None):
        """Copies the checkpoint to ``path`` (a new temporary dir if None); returns it."""
        path = path or tempfile.mkdtemp(prefix="tune_checkpoint_")
        shutil.copytree(self, path, symlinks=True, dirs_exist_ok=True)
        return path


def get_checkpoint():
    """The checkpoint to resume from (a Checkpoint, usable as its path string), or None on a
    fresh start."""
    path = os.environ.get("TUNE_RESTORE_CHECKPOINT")
    return Checkpoint(path) if path else None


class _Context:
    """What Ray's ``get_context()`` tells a trial about itself."""

    def get_trial_id(self):
        return trial_id()

    def get_trial_name(self):
        return os.environ.get("TUNE_TRIAL_NAME", "")

    def get_trial_dir(self):
        return trial_dir()

    def get_experiment_name(self):
        return os.environ.get("TUNE_EXPERIMENT_NAME", "")

    def get_world_size(self):
        return 1

    def get_world_rank(self):
        return 0

    def get_local_rank(self):
        return 0


def get_context():
    """The trial's context: get_trial_id(), get_trial_name(), get_trial_dir(),
    get_experiment_name()."""
    return _Context()


def _plain(value):
    """Plain Python values for json.dumps: numpy / torch scalars become numbers. NaN and
    infinities stay as they are (written as NaN, Infinity, -Infinity)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return _plain(value.item())
        except (TypeError, ValueError):
            pass
    return value


def _is_under(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _staging_root():
    """Where copies of checkpoints are staged: TUNE_CHECKPOINT_STAGING, else the trial dir;
    None outside tune."""
    return os.environ.get("TUNE_CHECKPOINT_STAGING") or os.environ.get("TUNE_TRIAL_DIR") or None


_PARTIAL = re.compile(r"^\.staged_checkpoint_(\d+)_\d+\.partial$")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's process: alive
    return True


def _remove_partial_copies():
    """Removes staged copies cut short by a kill (their process is gone). Complete staged dirs
    are left alone: a line naming one may not have been read by the driver yet."""
    root = _staging_root()
    try:
        names = os.listdir(root) if root else []
    except OSError:
        return
    for name in names:
        m = _PARTIAL.match(name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)


def _stage(checkpoint_dir):
    """Copies checkpoint_dir into the staging dir (complete before it is named) and returns
    the staged path; a directory already inside the trial dir is handed over as it is, and
    outside tune nothing is copied."""
    global _counter
    root = _staging_root()
    if root is None or _is_under(checkpoint_dir, trial_dir()):
        return os.path.abspath(checkpoint_dir)
    _counter += 1
    base = os.path.join(root, ".staged_checkpoint_%d_%d" % (os.getpid(), _counter))
    tmp = base + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint_dir, tmp, symlinks=True)
    os.rename(tmp, base)
    return base


def report(metrics=None, checkpoint=None, checkpoint_dir=None, **kwargs):
    """Reports one result (a dict of JSON-able values; keyword arguments are added to it, as
    Ray's old ``tune.report(loss=...)``). ``checkpoint`` (a Checkpoint or a path) or
    ``checkpoint_dir``: the directory's content is safe inside the trial dir before this
    returns, so a TemporaryDirectory works."""
    if checkpoint is not None and checkpoint_dir is not None:
        raise TypeError("report: give checkpoint or checkpoint_dir, not both")
    line = dict(_plain(dict(metrics or {})))
    line.update(_plain(kwargs))
    ckpt = checkpoint if checkpoint is not None else checkpoint_dir
    if ckpt is not None:
        path = os.fspath(ckpt)
        line["checkpoint"] = _stage(path)
        if getattr(ckpt, "_temporary", False) and line["checkpoint"] != os.path.abspath(path):
            shutil.rmtree(path, ignore_errors=True)  # from_dict's temporary dir, now copied
    _out.write(json.dumps(line) + "\n")
    _out.flush()


class Trainable:
    """Step-mode trainable (Ray Tune's class API). Override setup/step/save_checkpoint/
    load_checkpoint; reset_config and cleanup are optional. As in Ray, save_checkpoint may
    write files into the directory it is given, or return a dict (then load_checkpoint gets
    that dict back instead of the directory)."""

    def __init__(self, cfg=None):
        self.config = dict(cfg if cfg is not None else config())
        self.iteration = 0  # steps done by this process (training_iteration is the trial's)
        self.trial_id = trial_id()
        self.trial_name = os.environ.get("TUNE_TRIAL_NAME", "")
        self.logdir = self.trial_dir = trial_dir()
        self.setup(self.config)

    @property
    def training_iteration(self):
        return self.iteration

    def setup(self, config):
        pass

    def step(self):
        raise NotImplementedError("Trainable.step must return a dict of metrics")

    def save_checkpoint(self, checkpoint_dir):
        pass

    def load_checkpoint(self, checkpoint):
        pass

    def reset_config(self, new_config):
        return False

    def cleanup(self):
        pass


def _save(trainable, path):
    os.makedirs(path, exist_ok=True)
    data = trainable.save_checkpoint(path)
    if isinstance(data, dict):
        with open(os.path.join(path, _DICT_FILE), "wb") as f:
            pickle.dump(data, f)


def _load(trainable, path):
    """Hands load_checkpoint the dict save_checkpoint returned, else the directory."""
    ckpt = Checkpoint(path)
    trainable.load_checkpoint(ckpt.to_dict() if os.path.isfile(os.path.join(path, _DICT_FILE)) else ckpt)


def run_trainable(cls, stdin=None):
    """Serves the step-mode protocol on stdin/stdout until told to stop."""
    global _out
    stdin = stdin or sys.stdin
    _out = sys.stdout
    sys.stdout = sys.stderr  # user prints must not look like protocol replies
    try:
        trainable = cls(config())
        restore = get_checkpoint()
        if restore:
            _load(trainable, restore)
        for raw in stdin:
            raw = raw.strip()
            if not raw:
                continue
            try:
                cmd = json.loads(raw)
            except ValueError:
                print("tune_trial: ignoring a malformed command line", file=sys.stderr)
                continue
            op = cmd.get("op")
            if op == "step":
                result = trainable.step()
                if not isinstance(result, dict):
                    raise TypeError("Trainable.step must return a dict, got %r" % type(result))
                trainable.iteration += 1
                report(result)
            elif op == "save":
                _save(trainable, cmd["path"])
                _reply({"saved": cmd["path"]})
            elif op == "restore":
                _load(trainable, cmd["path"])
                _reply({"restored": cmd["path"]})
            elif op == "reset":
                ok = bool(trainable.reset_config(cmd.get("config", {})))
                if ok:
                    trainable.config = dict(cmd.get("config", {}))
                _reply({"reset": ok})
            elif op == "stop":
                break
        trainable.cleanup()
    finally:
        sys.stdout = _out
    return 0


def _reply(obj):
    _out.write(json.dumps(obj) + "\n")
    _out.flush()


_remove_partial_copies()
