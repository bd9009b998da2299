"""The digits objective of configs/examples/digits_mlp.py as a function: the same split, model,
seeds and epoch loop, returning the validation accuracy after every epoch (and the seconds each
epoch took). The benchmark computes each sampled config's curve once with it; the tune runs
replay those curves (replay_trial.py) and Optuna's objective reads them, so every method sees
exactly the numbers the example would print. `run.py --check-real` compares a real run of the example
with the curves."""
import json
import time
import warnings

PARAMS = ("hidden", "alpha", "lr", "batch_size")


def key(cfg):
    """The cache key of a config: its four searched values, as JSON (floats round-trip)."""
    return json.dumps({k: cfg[k] for k in PARAMS}, sort_keys=True)


def curve(cfg, epochs=27):
    """[(val_acc, seconds)] for epochs 1..epochs, exactly as digits_mlp.py computes them."""
    import numpy as np  # here, so that replay_trial.py (which needs key() only) starts fast
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    warnings.filterwarnings("ignore")
    batch = int(cfg["batch_size"])
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.3, random_state=0,
                                                      stratify=y)
    classes = np.unique(y)
    model = MLPClassifier(hidden_layer_sizes=(int(cfg["hidden"]),), alpha=float(cfg["alpha"]),
                          learning_rate_init=float(cfg["lr"]), batch_size=batch,
                          random_state=int(cfg.get("model_seed", 0)))
    rng = np.random.RandomState(int(cfg.get("model_seed", 0)))
    out = []
    for _ in range(epochs):
        t = time.perf_counter()
        order = rng.permutation(len(X_train))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            model.partial_fit(X_train[idx], y_train[idx], classes=classes)
        out.append((float(model.score(X_val, y_val)), time.perf_counter() - t))
    return out
