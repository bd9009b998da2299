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

Step mode (the driver drives the loop): subclass Trainable and call run_trainable(MyTrainable).

NaN and infinite values are written as json.dumps writes them (NaN, Infinity, -Infinity), which
tune accepts. A checkpoint_dir outside the trial dir is copied into it under a
`.staged_checkpoint_*` name (complete before the line naming it is printed); a copy cut short by
a kill is removed the next time the module is imported in that trial dir. Outside tune (no
TUNE_TRIAL_DIR) nothing is copied: the line names checkpoint_dir itself.
"""

import json
import os
import re
import shutil
import sys

__all__ = ["config", "trial_dir", "trial_id", "get_checkpoint", "report", "Trainable", "run_trainable"]

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


def get_checkpoint():
    """The checkpoint directory to resume from, or None on a fresh start."""
    return os.environ.get("TUNE_RESTORE_CHECKPOINT") or None


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


def report(metrics, checkpoint_dir=None):
    """Reports one result (a dict of JSON-able values). With checkpoint_dir, the directory's
    content is safe inside the trial dir before this returns, so a TemporaryDirectory works."""
    line = dict(_plain(dict(metrics)))
    if checkpoint_dir is not None:
        line["checkpoint"] = _stage(os.fspath(checkpoint_dir))
    _out.write(json.dumps(line) + "\n")
    _out.flush()


class Trainable:
    """Step-mode trainable (Ray Tune's class API). Override setup/step/save_checkpoint/
    load_checkpoint; reset_config and cleanup are optional."""

    def __init__(self, cfg=None):
        self.config = dict(cfg if cfg is not None else config())
        self.setup(self.config)

    def setup(self, config):
        pass

    def step(self):
        raise NotImplementedError("Trainable.step must return a dict of metrics")

    def save_checkpoint(self, checkpoint_dir):
        pass

    def load_checkpoint(self, checkpoint_dir):
        pass

    def reset_config(self, new_config):
        return False

    def cleanup(self):
        pass


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
            trainable.load_checkpoint(restore)
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
                report(result)
            elif op == "save":
                os.makedirs(cmd["path"], exist_ok=True)
                trainable.save_checkpoint(cmd["path"])
                _reply({"saved": cmd["path"]})
            elif op == "restore":
                trainable.load_checkpoint(cmd["path"])
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
