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
           "checkpoint_dir", "resume_from", "max_step"]

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
    """This process's MPI rank (0 without MPI), from the launcher's environment."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
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
