"""hpctune_report: the client side of hpctune's `command` trainer, in one dependency-free file.

hpctune runs a `trainer: {kind: command, command: "..."}` program once per trial. The program
learns its parameters from the environment and reports by printing lines on standard output:

    HPCTUNE_PARAMS     the trial's parameters, a JSON object
    HPCTUNE_TRIAL_ID   the trial's id
    HPCTUNE_TRIAL_DIR  a directory of its own (checkpoints, outputs; stdout.log and stderr.log)

    hpctune-report {"step": 3, "val_accuracy": 0.91}

Use it by copying this file next to your script, or with PYTHONPATH=<hpctune>/tools/python
(trainer: {env: {PYTHONPATH: ...}}). The protocol is described in hpctune's README.md
("Bring your own training script").
"""

import json
import math
import os
import sys

__all__ = ["params", "trial_id", "trial_dir", "rank", "report", "PREFIX"]

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
