#!/usr/bin/python3
"""A small CNN on Fashion-MNIST in PyTorch, trained under hpctune's `command` trainer.

Written as a PyTorch user writes one; what hpctune adds is the helper (tools/python/hpctune_report.py,
on PYTHONPATH through the config's `trainer.env`):

- the hyperparameters come from hp.params() (the trial's HPCTUNE_PARAMS; a plain value in the
  config's `space:` is a fixed one), over the DEFAULTS below;
- the validation images are drawn from hp.data_seed(), the campaign's, so that every trial
  validates on the same rows (an ensemble stage blends their predictions row by row);
- after every epoch it reports val/test accuracy and loss (hp.report) and saves its checkpoint
  (model, optimizer, epoch) atomically into hp.checkpoint_dir();
- it starts from hp.resume_from() when hpctune sets it (a retried attempt, a PBT member after its
  pause or an exploit: the snapshot's weights, with this trial's current hyperparameters), trains
  up to hp.max_step() when set (a PBT interval's end) and then exits;
- in a transfer stage it loads hp.source_checkpoint()'s weights: a new head when the classes
  differ, the first `freeze` layers frozen;
- at the end it writes its validation and test predictions with hp.save_predictions();
- it loops over hp.trials(): run once per process as usual, or, with `trainer.persistent: true`,
  one process (Python and `import torch` paid once, the dataset read once) trains trial after
  trial; it leaves its epoch loop when hp.report() returns False (the trial was asked to stop);
- with WORLD_SIZE > 1 (hpctune runs it under mpirun with MASTER_ADDR, MASTER_PORT, RANK, ...)
  it trains with DistributedDataParallel (gloo, CPU) and a DistributedSampler; only rank 0
  evaluates, reports and saves, and every rank writes the sha256 of its final weights into
  weights-rank<RANK>.sha256 in the trial directory (DDP keeps them identical).

Try it alone: `PYTHONPATH=tools/python /usr/bin/python3 examples/pytorch/train.py`
(HPCTUNE_PARAMS='{"epochs": 1}' for a quick run).
"""
import gzip
import hashlib
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hpctune_report as hp

DEFAULTS = {
    "lr": 0.1,                  # SGD step size
    "momentum": 0.9,
    "weight_decay": 0.0,
    "width": 16,                # channels of the first convolution (the second has twice as many)
    "hidden": 64,               # units of the dense layer before the head
    "dropout": 0.0,             # before the head
    "batch_size": 32,           # per rank
    "epochs": 3,
    "classes": list(range(10)),
    "max_train_samples": 3000,  # labelled images of `classes` drawn for this run (0 = all)...
    "val_fraction": 0.25,       # ...of which this fraction validates
    "max_test_samples": 2000,   # the first test images of `classes` (0 = all)
    "freeze": 0,                # transfer: the first N layers (conv1, conv2, fc) keep the source's weights
    "body_lr_scale": 1.0,       # transfer: the loaded layers train at this fraction of lr (the head at lr)
    "data_dir": "/usr/share/datasets/fashion-mnist",
}
LAYERS = ("conv1", "conv2", "fc")  # in order, for `freeze`; the head is always trained
CHECKPOINT = "model.pt"


# --- data ----------------------------------------------------------------------------------------


def read_idx(directory, stem):
    """An IDX file of ubyte values (`stem` or `stem`.gz) as a numpy array of its shape."""
    path = os.path.join(directory, stem + ".gz")
    if not os.path.exists(path):
        path = os.path.join(directory, stem)
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    if data[0:2] != b"\0\0" or data[2] != 8:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


_SPLITS = {}  # a persistent program reads each split once


def load_split(directory, prefix, classes, limit):
    """Images (N x 1 x 28 x 28 floats in [0, 1]) and labels (0..len(classes)-1) of `classes`."""
    key = (directory, prefix, tuple(classes), limit)
    if key not in _SPLITS:
        _SPLITS[key] = _load_split(directory, prefix, classes, limit)
    return _SPLITS[key]


def _load_split(directory, prefix, classes, limit):
    images = read_idx(directory, prefix + "-images-idx3-ubyte")
    labels = read_idx(directory, prefix + "-labels-idx1-ubyte")
    keep = np.isin(labels, classes)
    images, labels = images[keep], labels[keep]
    if limit:
        images, labels = images[:limit], labels[:limit]
    index = {c: i for i, c in enumerate(classes)}
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(np.array([index[int(c)] for c in labels], dtype=np.int64))
    return x, y


# --- the model -----------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self, width, hidden, classes, dropout):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)           # 28x28 -> pooled 14x14
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)   # 14x14 -> pooled 7x7
        self.fc = nn.Linear(2 * width * 7 * 7, hidden)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc(x.flatten(1)))
        return self.head(self.dropout(x))


def evaluate(net, x, y, batch=1000):
    """(accuracy, mean log loss, probabilities as a numpy array)."""
    net.eval()
    probs = []
    with torch.no_grad():
        for start in range(0, len(x), batch):
            probs.append(F.softmax(net(x[start:start + batch]), dim=1))
    net.train()
    p = torch.cat(probs)
    loss = F.nll_loss(torch.log(p.clamp_min(1e-12)), y).item()
    accuracy = (p.argmax(1) == y).float().mean().item()
    return accuracy, loss, p.numpy()


def save_checkpoint(directory, state):
    """torch.save into a temporary file, then renamed: the checkpoint is never half-written."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, CHECKPOINT)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def weights_digest(net):
    h = hashlib.sha256()
    for name, tensor in net.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def set_hyperparameters(optimizer, p):
    """This trial's rate, momentum and weight decay in every group (after a resume too)."""
    for group in optimizer.param_groups:
        group.update(lr=float(p["lr"]) * group["scale"], momentum=float(p["momentum"]),
                     weight_decay=float(p["weight_decay"]))


def stop_requested(world):
    """Whether the trial was asked to stop, the same answer on every rank (DDP ranks leave together)."""
    stop = hp.should_stop()
    if world > 1:
        flag = torch.tensor([1 if stop else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        stop = bool(flag.item())
    return stop


def main():
    torch.set_num_threads(int(os.environ.get("HPCTUNE_THREADS", "1")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo", init_method="env://")  # MASTER_ADDR, MASTER_PORT from hpctune
    for _ in hp.trials():  # once, or once per trial in a persistent program
        train_trial(world)
    if world > 1:
        dist.destroy_process_group()


def train_trial(world):
    started = time.time()
    p = dict(DEFAULTS)
    p.update(hp.params())
    rank = int(os.environ.get("RANK", "0"))
    seed = hp.seed() or 0  # hpctune's per-trial seed, below 2**32 (None outside hpctune)
    torch.manual_seed(seed)

    # The data: `max_train_samples` images of `classes`, split into train and validation by the
    # campaign's data seed (the same rows in every trial); the first test images of `classes`.
    classes = [int(c) for c in p["classes"]]
    x_all, y_all = load_split(p["data_dir"], "train", classes, 0)
    order = np.random.default_rng(hp.data_seed() or 0).permutation(len(x_all))  # None outside hpctune
    n = min(int(p["max_train_samples"]) or len(order), len(order))
    n_val = max(1, int(round(n * float(p["val_fraction"]))))
    val_rows, train_rows = torch.from_numpy(order[:n_val]), torch.from_numpy(order[n_val:n])
    x_val, y_val = x_all[val_rows], y_all[val_rows]
    train = TensorDataset(x_all[train_rows], y_all[train_rows])
    x_test, y_test = load_split(p["data_dir"], "t10k", classes, int(p["max_test_samples"]))

    net = SmallCNN(int(p["width"]), int(p["hidden"]), len(classes), float(p["dropout"]))

    # A transfer target starts from its source's weights; the head is new when the classes differ.
    source = hp.source_checkpoint()
    if source:
        state = torch.load(os.path.join(source, CHECKPOINT))
        weights = state["model"]
        if state.get("classes") != classes:
            weights = {k: v for k, v in weights.items() if not k.startswith("head.")}
        missing, unexpected = net.load_state_dict(weights, strict=False)
        if unexpected or any(not k.startswith("head.") for k in missing):
            raise SystemExit("train.py: the source checkpoint %s is not this network (missing %s, unexpected %s)"
                             % (source, missing, unexpected))
        for layer in LAYERS[:int(p["freeze"])]:
            for param in getattr(net, layer).parameters():
                param.requires_grad_(False)

    # Two groups of parameters: the head, and the layers below it (at body_lr_scale x lr when they
    # were loaded from a source). Frozen ones are in neither.
    scale = float(p["body_lr_scale"]) if source else 1.0
    body = [q for name, q in net.named_parameters() if q.requires_grad and not name.startswith("head.")]
    groups = [{"params": body, "scale": scale}, {"params": list(net.head.parameters()), "scale": 1.0}]
    optimizer = torch.optim.SGD([g for g in groups if g["params"]], lr=float(p["lr"]))
    set_hyperparameters(optimizer, p)

    # Resume: the weights, the optimizer's momentum and the epoch of the checkpoint hpctune names;
    # the hyperparameters are this trial's (after a PBT exploit, the explored values).
    epoch = 0
    resume = hp.resume_from()
    if resume:
        state = torch.load(os.path.join(resume, CHECKPOINT))
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        set_hyperparameters(optimizer, p)
        epoch = int(state["step"])

    model = DistributedDataParallel(net) if world > 1 else net
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=seed) if world > 1 else None
    last = hp.max_step() if hp.max_step() is not None else int(p["epochs"])

    predictions = None  # the last epoch's (val, test) probabilities, rank 0's
    while epoch < last:
        epoch_started = time.time()
        if sampler is not None:
            sampler.set_epoch(epoch)
            loader = DataLoader(train, batch_size=int(p["batch_size"]), sampler=sampler)
        else:  # the epoch's order from the seed and the epoch: a resumed run draws the same
            loader = DataLoader(train, batch_size=int(p["batch_size"]), shuffle=True,
                                generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        epoch += 1
        if rank == 0:
            val_accuracy, val_loss, val_probs = evaluate(net, x_val, y_val)
            test_accuracy, test_loss, test_probs = evaluate(net, x_test, y_test)
            predictions = (val_probs, test_probs)
            save_checkpoint(hp.checkpoint_dir(), {"model": net.state_dict(), "optimizer": optimizer.state_dict(),
                                               "step": epoch, "classes": classes, "params": p})
            # epoch_seconds: the epoch's own work (training, evaluation, checkpoint); what an attempt
            # takes beyond its epochs is the program's start-up (bench/run-pbt-pytorch measures it).
            hp.report(epoch, val_accuracy=val_accuracy, val_loss=val_loss, test_accuracy=test_accuracy,
                      test_loss=test_loss, epoch_seconds=time.time() - epoch_started)
            print("epoch %d: val_accuracy %.4f test_accuracy %.4f (%.1f s)" % (epoch, val_accuracy, test_accuracy,
                                                                              time.time() - started), flush=True)
        if stop_requested(world):
            break

    if rank == 0:
        if predictions is None:  # resumed at its last step: nothing trained here
            predictions = (evaluate(net, x_val, y_val)[2], evaluate(net, x_test, y_test)[2])
        hp.save_predictions("val", predictions[0], y_val.numpy())
        hp.save_predictions("test", predictions[1], y_test.numpy())
    if world > 1:
        with open(os.path.join(hp.trial_dir(), "weights-rank%d.sha256" % rank), "w") as f:
            f.write(weights_digest(net) + "\n")
        dist.barrier()


if __name__ == "__main__":
    main()
