"""Function-mode example with the Python helper: a linear regressor trained by SGD in pure
Python (no numpy needed), checkpointed with Ray Tune's TemporaryDirectory idiom."""
import json
import os
import random
import tempfile

import tune_trial

cfg = tune_trial.config()
lr, momentum, epochs = cfg["lr"], cfg["momentum"], int(cfg.get("epochs", 15))

rng = random.Random(1234)  # the same data for every trial
true_w = [rng.gauss(0, 1) for _ in range(8)]
data = []
for _ in range(400):
    x = [rng.gauss(0, 1) for _ in range(8)]
    data.append((x, sum(a * b for a, b in zip(x, true_w)) + rng.gauss(0, 0.3)))
train, val = data[:320], data[320:]

w, v, start = [0.0] * 8, [0.0] * 8, 0
ckpt = tune_trial.get_checkpoint()
if ckpt:
    with open(os.path.join(ckpt, "state.json")) as f:
        st = json.load(f)
    w, v, start = st["w"], st["v"], st["epoch"]

def mse(rows):
    return sum((sum(a * b for a, b in zip(x, w)) - y) ** 2 for x, y in rows) / len(rows)

print("training with lr=%g momentum=%g from epoch %d" % (lr, momentum, start))  # ignored by tune
for epoch in range(start, epochs):
    order = list(range(len(train)))
    random.Random(epoch).shuffle(order)
    for i in order:
        x, y = train[i]
        err = sum(a * b for a, b in zip(x, w)) - y
        for j in range(8):
            v[j] = momentum * v[j] - lr * err * x[j]
            w[j] += v[j]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"w": w, "v": v, "epoch": epoch + 1}, f)
        tune_trial.report({"epoch": epoch + 1, "train_mse": mse(train), "val_mse": mse(val)}, checkpoint_dir=d)
