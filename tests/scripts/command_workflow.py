"""A user's own training program for the command-trainer workflow tests (test_command_workflow.cpp).

Run by hpctune with /usr/bin/python3 (numpy) and PYTHONPATH=<hpctune>/tools/python:

    command_workflow.py classify [--corrupt-member M] [--short-member M]
        A small network (8 inputs, 16 tanh units, a softmax head) trained by full-batch gradient
        descent on a synthetic dataset of 10 Gaussian classes drawn from a fixed seed (the "files on
        disk"), restricted to the parameter `classes` (default 0-4: the source task). The validation
        split is drawn from HPCTUNE_DATA_SEED, so every trial of a campaign holds out the same rows.
        Reports val_accuracy per step and test_accuracy at the end; saves its predictions for an
        ensemble (val_indices.npy too, as int32), its body's weights in its checkpoint directory,
        and, given HPCTUNE_SOURCE_CHECKPOINT, starts its body from the source's (frozen with
        freeze >= 1). --corrupt-member M: the trial whose parameter `member` is M changes its
        validation label at row 2 (and writes no val_indices); --short-member M: that trial drops
        its last validation row.
    command_workflow.py regress
        Hand-made regression predictions with a known best blend: member 0 predicts y + e, member 1
        y - e (as float32 1-D files written with np.save), member 2 y + 2; it reports `score` 0.5,
        0.6, 0.4.

Every run writes seen.json into its trial directory: what hpctune gave it (the environment
variables, its parameters) and what it loaded.
"""

import hashlib
import json
import os
import sys

import numpy as np

import hpctune_report as h

SEEN_VARS = ("HPCTUNE_DATA_SEED", "HPCTUNE_SOURCE_CHECKPOINT", "HPCTUNE_SOURCE_TRIAL", "HPCTUNE_SEED",
             "HPCTUNE_TRIAL_ID")


def write_seen(extra):
    seen = {name: os.environ.get(name) for name in SEEN_VARS}
    seen["params"] = h.params()
    seen.update(extra)
    with open(os.path.join(h.trial_dir(), "seen.json"), "w") as f:
        json.dump(seen, f)


def checkpoint_dir():
    path = os.environ.get("HPCTUNE_CHECKPOINT_DIR", "") or os.path.join(h.trial_dir(), "checkpoint")
    os.makedirs(path, exist_ok=True)
    return path


def dataset():
    """10 classes in 8 dimensions: a training pool of 800 and a test set of 400, from a fixed seed."""
    rng = np.random.default_rng(12345)
    centers = rng.normal(size=(10, 8)) * 1.2
    def draw(n):
        y = rng.integers(0, 10, size=n)
        return centers[y] + rng.normal(size=(n, 8)), y
    return draw(800), draw(400)


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def option(name):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else None


def classify():
    p = h.params()
    classes = list(p.get("classes", [0, 1, 2, 3, 4])) or list(range(10))
    lr = float(p.get("lr", 0.2))
    steps = int(p.get("steps", 8))
    freeze = int(p.get("freeze", 0))
    cap = int(p.get("max_train_samples", 0))
    member = p.get("member")

    (x_pool, y_pool), (x_test, y_test) = dataset()
    label_of = {c: i for i, c in enumerate(classes)}  # the target's labels are 0..len(classes)-1
    keep = np.isin(y_pool, classes)
    x_pool, y_pool = x_pool[keep], np.array([label_of[c] for c in y_pool[keep]], dtype=np.int64)
    keep = np.isin(y_test, classes)
    x_test, y_test = x_test[keep], np.array([label_of[c] for c in y_test[keep]], dtype=np.int64)
    if cap > 0:
        x_pool, y_pool = x_pool[:cap], y_pool[:cap]
    # The validation split: the campaign's, the same rows in every trial.
    order = np.random.default_rng(h.data_seed() or 0).permutation(len(y_pool))
    n_val = len(order) // 4
    val_idx, train_idx = order[:n_val], order[n_val:]
    x_val, y_val, x_tr, y_tr = x_pool[val_idx], y_pool[val_idx], x_pool[train_idx], y_pool[train_idx]

    rng = np.random.default_rng(int(os.environ.get("HPCTUNE_SEED", "0")) % (2 ** 32))
    w1 = rng.normal(size=(8, 16)) * 0.3
    b1 = np.zeros(16)
    w2 = rng.normal(size=(16, len(classes))) * 0.3
    b2 = np.zeros(len(classes))
    loaded = None
    source = h.source_checkpoint()
    if source is not None:
        path = os.path.join(source, "body.npz")
        with open(path, "rb") as f:
            loaded = hashlib.sha256(f.read()).hexdigest()
        body = np.load(path)
        w1, b1 = body["w1"].copy(), body["b1"].copy()

    def forward(x):
        hidden = np.tanh(x @ w1 + b1)
        return hidden, softmax(hidden @ w2 + b2)

    onehot = np.eye(len(classes))[y_tr]
    for step in range(1, steps + 1):
        hidden, probs = forward(x_tr)
        g = (probs - onehot) / len(y_tr)
        gw2, gb2 = hidden.T @ g, g.sum(axis=0)
        gh = (g @ w2.T) * (1 - hidden ** 2)
        if freeze < 1:
            w1 -= lr * (x_tr.T @ gh)
            b1 -= lr * gh.sum(axis=0)
        w2 -= lr * gw2
        b2 -= lr * gb2
        val_probs = forward(x_val)[1]
        metrics = {"val_accuracy": float((val_probs.argmax(axis=1) == y_val).mean())}
        if step == steps:
            test_probs = forward(x_test)[1]
            metrics["test_accuracy"] = float((test_probs.argmax(axis=1) == y_test).mean())
        h.report(step, **metrics)

    np.savez(os.path.join(checkpoint_dir(), "body.npz"), w1=w1, b1=b1)
    val_labels = y_val.copy()
    if member is not None and member == option("--corrupt-member"):
        val_labels[2] = (val_labels[2] + 1) % len(classes)
    if member is not None and member == option("--short-member"):
        val_probs, val_labels, val_idx = val_probs[:-1], val_labels[:-1], val_idx[:-1]
    h.save_predictions("val", val_probs, val_labels)
    h.save_predictions("test", test_probs, y_test)
    if option("--corrupt-member") is None:
        np.save(os.path.join(h.trial_dir(), "val_indices.npy"), val_idx.astype(np.int32))
    write_seen({"loaded_sha256": loaded, "val_rows": int(len(val_labels))})


def regress():
    member = int(h.params()["member"])
    y_val, y_test = np.array([1.0, 2, 3, 4]), np.array([5.0, 6, 7])
    e_val, e_test = np.array([0.5, -0.5, 0.25, 1]), np.array([0.2, 0.4, -0.6])
    if member == 1:  # float32, one value per row, as a user might save them
        for name, values in (("val_pred", y_val - e_val), ("test_pred", y_test - e_test),
                             ("val_targets", y_val), ("test_targets", y_test)):
            np.save(os.path.join(h.trial_dir(), name + ".npy"), values.astype(np.float32))
    else:
        shift = (lambda y, e: y + e) if member == 0 else (lambda y, e: y + 2)
        h.save_regression("val", shift(y_val, e_val), y_val)
        h.save_regression("test", shift(y_test, e_test), y_test)
    h.report(1, score=[0.5, 0.6, 0.4][member])
    write_seen({})


if __name__ == "__main__":
    {"classify": classify, "regress": regress}[sys.argv[1]]()
