#!/usr/bin/env python3
"""A training script for hpctune's `command` trainer (configs/command-python.yaml).

It trains a logistic-regression classifier by SGD on a synthetic two-class data set, in plain
Python (no dependencies), and shows what a real script does under hpctune:

- it takes its hyperparameters from the command line (the `{lr}` placeholders of the config's
  `command:`); hpctune_report.params() has all of them as well, conditional ones included;
- it reports its metrics after every epoch with hpctune_report.report(), which prints the
  `hpctune-report {...}` line hpctune reads (early stopping judges these reports);
- it keeps a checkpoint in its trial directory (hpctune_report.trial_dir()) and resumes from it
  when hpctune runs the trial again after its trainer group was lost.

Run it alone to try it: `PYTHONPATH=tools/python python3 configs/command_train.py --lr 0.1`.
"""
import argparse
import json
import math
import os
import random

import hpctune_report as hp

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--l2", type=float, default=0.0)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--epochs", type=int, default=10)
args = parser.parse_args()

# The data: two overlapping Gaussian clouds in 20 dimensions, drawn from a fixed seed so that every
# trial sees the same data. Few training points (150) for so many dimensions, so that the step size
# and the L2 penalty matter; 400 validation points.
data_rng = random.Random(1234)
DIM = 20
centre = [data_rng.gauss(0.0, 0.25) for _ in range(DIM)]


def point(label):
    sign = 1.0 if label else -1.0
    return [sign * c + data_rng.gauss(0.0, 1.0) for c in centre], label


train = [point(i % 2) for i in range(150)]
val = [point(i % 2) for i in range(400)]


def predict(w, b, x):
    z = b + sum(wi * xi for wi, xi in zip(w, x))
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def evaluate(w, b, rows):
    loss = correct = 0
    for x, y in rows:
        p = min(max(predict(w, b, x), 1e-7), 1 - 1e-7)
        loss -= math.log(p) if y else math.log(1.0 - p)
        correct += (p >= 0.5) == bool(y)
    return loss / len(rows), correct / len(rows)


# Resume from the checkpoint of an earlier attempt of this trial, if there is one.
checkpoint = os.path.join(hp.trial_dir(), "checkpoint.json")
state = {"epoch": 0, "w": [0.0] * DIM, "b": 0.0}
if os.path.exists(checkpoint):
    with open(checkpoint) as f:
        state = json.load(f)
w, b = state["w"], state["b"]
shuffle_rng = random.Random(os.environ.get("HPCTUNE_SEED", "0"))  # hpctune's per-trial seed

for epoch in range(state["epoch"] + 1, args.epochs + 1):
    order = list(range(len(train)))
    shuffle_rng.shuffle(order)
    for start in range(0, len(order), args.batch_size):
        batch = [train[i] for i in order[start:start + args.batch_size]]
        gw, gb = [0.0] * DIM, 0.0
        for x, y in batch:
            err = predict(w, b, x) - y
            gw = [g + err * xi for g, xi in zip(gw, x)]
            gb += err
        w = [wi - args.lr * (g / len(batch) + args.l2 * wi) for wi, g in zip(w, gw)]
        b -= args.lr * gb / len(batch)
    val_loss, val_accuracy = evaluate(w, b, val)
    hp.report(epoch, val_accuracy=val_accuracy, val_loss=val_loss)
    # Written to a temporary file and renamed, so that a kill never leaves half a checkpoint.
    with open(checkpoint + ".tmp", "w") as f:
        json.dump({"epoch": epoch, "w": w, "b": b}, f)
    os.replace(checkpoint + ".tmp", checkpoint)
    print("epoch %d: val_accuracy %.4f" % (epoch, val_accuracy), flush=True)  # goes to stdout.log
