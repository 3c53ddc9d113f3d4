"""hpctune_report: the client side of hpctune's `command` trainer, in one dependency-free file.

hpctune runs a `trainer: {kind: command, command: "..."}` program once per trial. The program
learns its parameters from the environment and reports by printing lines on standard output:

    HPCTUNE_PARAMS     the trial's parameters, a JSON object
    HPCTUNE_TRIAL_ID   the trial's id
    HPCTUNE_TRIAL_DIR  a directory of its own (checkpoints, outputs; stdout.log and stderr.log)
    HPCTUNE_CHECKPOINT_DIR, HPCTUNE_RESUME_FROM, HPCTUNE_MAX_STEP: see checkpoint_dir(),
                       resume_from() and max_step()

    hpctune-report {"step": 3, "val_accuracy": 0.91}

Use it by copying this file next to your script, or with PYTHONPATH=<hpctune>/tools/python
(trainer: {env: {PYTHONPATH: ...}}). The protocol is described in hpctune's README.md
("Bring your own training script").
"""

import json
import math
import os
import sys

__all__ = ["params", "trial_id", "trial_dir", "rank", "report", "PREFIX",
           "checkpoint_dir", "resume_from", "max_step",
           "data_seed", "source_checkpoint", "source_trial", "save_predictions", "save_regression"]

PREFIX = "hpctune-report"


def params():
    """The trial's parameters (a dict; {} when not run by hpctune)."""
    text = os.environ.get("HPCTUNE_PARAMS", "")
    return json.loads(text) if text else {}


def trial_id():
    """The trial's id (an int), or None when not run by hpctune."""
    text = os.environ.get("HPCTUNE_TRIAL_ID", "")
    return int(text) if text else None


def trial_dir():
    """The trial's own directory, or the current one when not run by hpctune."""
    return os.environ.get("HPCTUNE_TRIAL_DIR", "") or os.getcwd()


# --- checkpoints (HPCTUNE_CHECKPOINT_DIR, HPCTUNE_RESUME_FROM, HPCTUNE_MAX_STEP) -------------------


def checkpoint_dir():
    """The directory where the program saves its checkpoint (any files it likes), created by hpctune
    and kept across the trial's attempts; hpctune snapshots it whole (a pbt stage). Outside hpctune:
    ./checkpoint, created. Save atomically: write a temporary name in it, then os.replace() it onto
    the final name, so that a kill mid-save leaves the previous checkpoint whole. Save the
    checkpoint of a step before you report() that step: a pbt stage stops the program on it."""
    path = os.environ.get("HPCTUNE_CHECKPOINT_DIR", "")
    if not path:
        path = os.path.join(os.getcwd(), "checkpoint")
        os.makedirs(path, exist_ok=True)
    return path


def resume_from():
    """The checkpoint directory to load before training, or None to start afresh: the trial's own
    checkpoint_dir() when an earlier attempt left one (the attempt runs again after its group was
    lost; it may thus be checkpoint_dir() itself: load it before saving), or the snapshot a pbt
    stage chose (another member's, after an exploit; read-only). Your own directory may hold only
    the temporary file of a save cut short: start afresh when your checkpoint file is not there."""
    return os.environ.get("HPCTUNE_RESUME_FROM", "") or None


def max_step():
    """The step to train to (an int), then save the checkpoint and exit 0; None for no limit. A pbt
    stage sets it to the end of each interval (trainer.max_step in the config otherwise)."""
    text = os.environ.get("HPCTUNE_MAX_STEP", "")
    return int(text) if text else None


def rank():
    """This process's rank (0 with one): RANK, which hpctune gives every rank of a command trainer,
    else the launcher's own (Open MPI, PMI, PMIx, SLURM) when the program was started otherwise."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        text = os.environ.get(name, "")
        if text.isdigit():
            return int(text)
    return 0


def report(step, **metrics):
    """Reports the metrics reached at `step` (an int >= 0). Only rank 0 prints; the others return.

    Metrics must be numbers. JSON has no NaN or infinity, so a non-finite value (a diverged loss)
    is left out with a warning on standard error, and a report left without metrics is not sent.
    """
    if rank() != 0:
        return
    step = int(step)
    if step < 0:
        raise ValueError("step must be >= 0")
    if not metrics:
        raise ValueError("report() needs at least one metric")
    line = {"step": step}
    for name, value in metrics.items():
        if name == "step":
            raise ValueError("'step' is not a metric name")
        value = float(value)  # ints, numpy scalars and 0-d torch tensors alike
        if not math.isfinite(value):
            sys.stderr.write("hpctune_report: metric %r = %r left out of step %d (not finite)\n" % (name, value, step))
            continue
        line[name] = value
    if len(line) == 1:
        return
    sys.stdout.write(PREFIX + " " + json.dumps(line) + "\n")
    sys.stdout.flush()


# --- workflows: an ensemble stage reads the program's predictions, a transfer stage gives it a source ---


def data_seed():
    """The campaign's data seed (an int; None when not run by hpctune): the same for every trial of a
    campaign, so draw the validation split from it (and the trial's own randomness from HPCTUNE_SEED)."""
    text = os.environ.get("HPCTUNE_DATA_SEED", "")
    return int(text) if text else None


def source_checkpoint():
    """In a transfer stage's target trial, the source trial's checkpoint directory (read it, never
    write it); None otherwise (a search trial, or a transfer stage's baseline twin)."""
    return os.environ.get("HPCTUNE_SOURCE_CHECKPOINT", "") or None


def source_trial():
    """In a transfer stage's target trial, the source trial's id (an int); None otherwise."""
    text = os.environ.get("HPCTUNE_SOURCE_TRIAL", "")
    return int(text) if text else None


def _save_arrays(arrays):
    """Writes each (name, array) as <trial_dir>/<name>.npy, through a temporary file renamed onto it,
    so that an ensemble stage never reads half a file."""
    import numpy as np

    directory = trial_dir()
    for name, array in arrays:
        path = os.path.join(directory, name + ".npy")
        tmp = path + ".tmp-%d" % os.getpid()
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)


def save_predictions(split, probs, labels):
    """Saves a classifier's predictions for an ensemble stage: `split` is "val" or "test", `probs` the
    class probabilities (rows x classes, each row summing to 1) and `labels` the true classes (rows),
    as <trial_dir>/<split>_probs.npy (float32) and <split>_labels.npy (int64). Every trial must use
    the same rows in the same order (draw the validation split from data_seed()). Needs numpy."""
    import numpy as np

    if split not in ("val", "test"):
        raise ValueError("split must be 'val' or 'test', not %r" % (split,))
    probs = np.asarray(probs, dtype=np.float32)
    labels = np.asarray(labels).astype(np.int64).reshape(-1)
    if probs.ndim != 2 or probs.shape[0] != labels.shape[0]:
        raise ValueError("probs must be rows x classes and labels one per row; got %s and %s"
                         % (probs.shape, labels.shape))
    _save_arrays([(split + "_probs", probs), (split + "_labels", labels)])


def save_regression(split, pred, targets):
    """Saves a regression's predictions for an ensemble stage with `task: regression`: `split` is "val"
    or "test", `pred` and `targets` rows x outputs (or one value per row), as <trial_dir>/<split>_pred.npy
    and <split>_targets.npy (float64). Needs numpy."""
    import numpy as np

    if split not in ("val", "test"):
        raise ValueError("split must be 'val' or 'test', not %r" % (split,))
    pred = np.asarray(pred, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    if pred.ndim == 1:
        pred = pred.reshape(-1, 1)
    if targets.ndim == 1:
        targets = targets.reshape(-1, 1)
    if pred.ndim != 2 or pred.shape != targets.shape:
        raise ValueError("pred and targets must have one shape, rows x outputs; got %s and %s"
                         % (pred.shape, targets.shape))
    _save_arrays([(split + "_pred", pred), (split + "_targets", targets)])
