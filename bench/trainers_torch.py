#!/usr/bin/python3
"""bench/trainers_torch.py: the PyTorch side of bench/run-trainers.

The same models, data and loop as bench_trainers (bench/trainers.cpp): Fashion-MNIST pixels / 255
standardised with the training file's mean and standard deviation, a seeded shuffle per epoch,
minibatches of --batch (the last one smaller), SGD with momentum 0.9 at a constant rate, CPU only,
torch.set_num_threads(--threads). Training images/s is measured per epoch over the training steps
(minibatch gather included, evaluation excluded); the median over epochs is reported. Prints one
JSON object on stdout, with the OpenBLAS kernels torch loaded (openblas_get_corename through
ctypes, in this process) and torch's build configuration.
"""
import argparse, ctypes, gzip, json, os, statistics, sys, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def openblas_core():
    """The kernel family of the OpenBLAS mapped into this process (the one torch calls)."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "openblas" in p or "libblas" in p:
                paths.add(p)
    for p in sorted(paths):
        try:
            lib = ctypes.CDLL(p)
            fn = lib.openblas_get_corename
            fn.restype = ctypes.c_char_p
            return fn().decode(), p
        except (OSError, AttributeError):
            continue
    return "unknown", ",".join(sorted(paths))


class Mlp(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.l1, self.l2, self.out = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, classes)

    def forward(self, x):
        x = x.view(x.shape[0], -1)
        return self.out(F.relu(self.l2(F.relu(self.l1(x)))))


class Cnn(nn.Module):
    """The default CNN: conv 5x5 32 same relu, maxpool 2, conv 5x5 64 same relu, maxpool 2,
    dense 1024 relu, dropout, dense classes."""

    def __init__(self, classes, dropout):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)
        self.fc, self.out = nn.Linear(64 * 7 * 7, 1024), nn.Linear(1024, classes)
        self.dropout = dropout

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.relu(self.fc(x.flatten(1)))
        if self.dropout > 0:
            x = F.dropout(x, self.dropout, self.training)
        return self.out(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=-1)
    ap.add_argument("--dropout", type=float, default=-1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-train", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    tr_x = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    tr_y = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    te_x = read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    te_y = read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    mean, std = float(tr_x.mean(dtype=np.float64)), float(tr_x.std(dtype=np.float64))
    tr_x, te_x = (tr_x - mean) / std, (te_x - mean) / std
    if a.max_train > 0:
        tr_x, tr_y = tr_x[:a.max_train], tr_y[:a.max_train]
    classes = int(max(tr_y.max(), te_y.max())) + 1
    shape = (-1, 784) if a.model == "mlp" else (-1, 1, 28, 28)
    xs, ys = torch.from_numpy(np.ascontiguousarray(tr_x.reshape(shape))), torch.from_numpy(tr_y)
    txs, tys = torch.from_numpy(np.ascontiguousarray(te_x.reshape(shape))), torch.from_numpy(te_y)

    if a.model == "mlp":
        lr = a.lr if a.lr > 0 else 0.05
        dropout = 0.0
        model = Mlp(classes)
    else:
        lr = a.lr if a.lr > 0 else 0.02
        dropout = a.dropout if a.dropout >= 0 else 0.4
        model = Cnn(classes, dropout)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    n = xs.shape[0]
    rates, per_epoch = [], []
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(n)
        loss_sum, correct = 0.0, 0
        t0 = time.perf_counter()
        for start in range(0, n, a.batch):
            idx = perm[start:start + a.batch]
            xb, yb = xs[idx], ys[idx]
            opt.zero_grad(set_to_none=True)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            loss.backward()
            opt.step()
            loss_sum += float(loss) * len(idx)
            correct += int((logits.argmax(1) == yb).sum())
        sec = time.perf_counter() - t0
        rates.append(n / sec)
        per_epoch.append({"epoch": epoch + 1, "seconds": sec, "images_per_second": n / sec,
                          "train_loss": loss_sum / n, "train_accuracy": correct / n})
        print(f"torch {a.model} epoch {epoch + 1}: {n / sec:.1f} images/s, train loss {loss_sum / n:.4f} "
              f"acc {correct / n:.4f}", file=sys.stderr)
    model.eval()
    correct, loss_sum = 0, 0.0
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, txs.shape[0], 1000):
            logits = model(txs[start:start + 1000])
            y = tys[start:start + 1000]
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
    test_sec = time.perf_counter() - t0
    core, lib = openblas_core()
    print(json.dumps({
        "side": "pytorch", "model": a.model, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "batch": a.batch, "epochs": a.epochs, "lr": lr, "momentum": 0.9, "dropout": dropout, "train_images": n,
        "images_per_second": statistics.median(rates), "per_epoch": per_epoch,
        "test_accuracy": correct / txs.shape[0], "test_loss": loss_sum / txs.shape[0],
        "test_images_per_second": txs.shape[0] / test_sec,
        "blas_core": core, "blas_library": lib, "mkldnn_enabled": torch.backends.mkldnn.is_available(),
        "config": torch.__config__.show(),
    }))


if __name__ == "__main__":
    main()
