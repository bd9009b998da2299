"""Optional PyTorch example (Debian's python3-torch): a small MLP on a synthetic
classification task, checkpointed with torch.save through the Python helper."""
import os
import tempfile

import torch
from torch import nn

import tune_trial

cfg = tune_trial.config()
torch.manual_seed(0)
n, d = 2048, 20
X = torch.randn(n, d)
y = ((X[:, :5].sum(dim=1) + 0.5 * torch.randn(n)) > 0).long()
Xtr, ytr, Xva, yva = X[:1600], y[:1600], X[1600:], y[1600:]

model = nn.Sequential(nn.Linear(d, cfg["hidden"]), nn.ReLU(), nn.Linear(cfg["hidden"], 2))
opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
start = 0
ckpt = tune_trial.get_checkpoint()
if ckpt:
    state = torch.load(os.path.join(ckpt, "model.pt"))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["epoch"]

loss_fn = nn.CrossEntropyLoss()
for epoch in range(start, cfg["epochs"]):
    model.train()
    perm = torch.randperm(len(Xtr))
    for i in range(0, len(Xtr), 64):
        idx = perm[i:i + 64]
        opt.zero_grad()
        loss = loss_fn(model(Xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(Xva)
        val_loss = loss_fn(logits, yva).item()
        acc = (logits.argmax(dim=1) == yva).float().mean().item()
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch + 1},
                   os.path.join(tmp, "model.pt"))
        tune_trial.report({"epoch": epoch + 1, "val_loss": val_loss, "val_accuracy": acc}, checkpoint_dir=tmp)
