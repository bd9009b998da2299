"""A small real training problem with no download: scikit-learn's digits (8x8 images, 10
classes) and an MLPClassifier trained one epoch at a time with partial_fit. Reports validation
accuracy after every epoch and checkpoints the model with pickle, so schedulers can stop, pause
and resume it (configs/asha_digits.yaml, configs/hyperband_digits.yaml). Under PBT a trial may
restore another trial's checkpoint with a changed config (configs/pbt_digits.yaml): the
restored model then takes the config's alpha and learning rate (and batch size) from here on;
its layer sizes are the checkpoint's.

Needs Debian's python3-sklearn (scripts/setup.sh --examples installs it)."""
import os
import pickle
import sys
import tempfile
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

import tune_trial

warnings.filterwarnings("ignore", category=ConvergenceWarning)

cfg = tune_trial.config()
epochs = int(cfg.get("epochs", 27))
batch = int(cfg["batch_size"])

X, y = load_digits(return_X_y=True)
X = X / 16.0
# The same split for every trial (seed 0); the model's own seed comes from the config.
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
classes = np.unique(y)

start = 0
ckpt = tune_trial.get_checkpoint()
if ckpt:
    with open(os.path.join(ckpt, "model.pkl"), "rb") as f:
        state = pickle.load(f)
    model, start, rng_state = state["model"], state["epoch"], state["rng"]
    rng = np.random.RandomState()
    rng.set_state(rng_state)
    # The config may differ from the one the checkpoint was trained with (a PBT exploit): the
    # regularization and the optimizer's learning rate follow this trial's config.
    model.set_params(alpha=float(cfg["alpha"]), learning_rate_init=float(cfg["lr"]),
                     batch_size=batch)
    if getattr(model, "_optimizer", None) is not None:
        model._optimizer.learning_rate_init = float(cfg["lr"])
        model._optimizer.learning_rate = float(cfg["lr"])
else:
    model = MLPClassifier(hidden_layer_sizes=(int(cfg["hidden"]),), alpha=float(cfg["alpha"]),
                          learning_rate_init=float(cfg["lr"]), batch_size=batch,
                          random_state=int(cfg.get("model_seed", 0)))
    rng = np.random.RandomState(int(cfg.get("model_seed", 0)))

for epoch in range(start, epochs):
    order = rng.permutation(len(X_train))
    for i in range(0, len(order), batch):
        idx = order[i:i + batch]
        model.partial_fit(X_train[idx], y_train[idx], classes=classes)
    acc = float(model.score(X_val, y_val))
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "model.pkl"), "wb") as f:
            pickle.dump({"model": model, "epoch": epoch + 1, "rng": rng.get_state()}, f)
        tune_trial.report({"epoch": epoch + 1, "val_acc": acc}, checkpoint_dir=d)
sys.stdout.flush()
