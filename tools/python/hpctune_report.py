"""hpctune_report: the client side of hpctune's `command` trainer, in one dependency-free file.

hpctune runs a `trainer: {kind: command, command: "..."}` program once per trial. The program
learns its parameters from the environment and reports by printing lines on standard output:

    HPCTUNE_PARAMS     the trial's parameters, a JSON object
    HPCTUNE_TRIAL_ID   the trial's id
    HPCTUNE_TRIAL_DIR  a directory of its own (checkpoints, outputs; stdout.log and stderr.log)
    HPCTUNE_CHECKPOINT_DIR, HPCTUNE_RESUME_FROM, HPCTUNE_MAX_STEP: see checkpoint_dir(),
                       resume_from() and max_step()
    HPCTUNE_SEED, HPCTUNE_DATA_SEED: 64-bit; seed() and data_seed() give them below 2**32

    hpctune-report {"step": 3, "val_accuracy": 0.91}

A program that serves many trials in one process (trainer: {persistent: true}, so that Python and
its imports start once) loops over them; the same program works without persistent, and outside
hpctune, where the loop runs once:

    for trial in hp.trials():
        p = hp.params()                    # every accessor answers for the current trial
        for epoch in range(...):
            ...
            if not hp.report(epoch, val_accuracy=acc):
                break                      # asked to stop (trial.stopped, hp.should_stop())

Use it by copying this file next to your script, or with PYTHONPATH=<hpctune>/tools/python
(trainer: {env: {PYTHONPATH: ...}}). The protocol is described in hpctune's README.md
("Bring your own training script").
"""

import json
import os
import select
import signal
import socket
import sys
import threading

__all__ = ["params", "trial_id", "trial_dir", "rank", "report", "PREFIX", "trials", "should_stop", "Trial",
           "checkpoint_dir", "resume_from", "max_step",
           "seed", "data_seed", "fold_seed", "source_checkpoint", "source_trial", "save_predictions", "save_regression"]

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
    Returns False once the trial was asked to stop (a persistent program: leave the epoch loop and
    go on to the next iteration of trials()), True otherwise.

    Metrics must be numbers. A non-finite value (a diverged loss) is sent as json.dumps writes it
    (NaN, Infinity), which hpctune reads: early stopping prunes the trial and PBT replaces the
    member, instead of training it on.
    """
    if rank() != 0:
        return not should_stop()
    step = int(step)
    if step < 0:
        raise ValueError("step must be >= 0")
    if not metrics:
        raise ValueError("report() needs at least one metric")
    line = {"step": step}
    for name, value in metrics.items():
        if name == "step":
            raise ValueError("'step' is not a metric name")
        line[name] = float(value)  # ints, numpy scalars and 0-d torch tensors alike
    sys.stdout.write(PREFIX + " " + json.dumps(line) + "\n")
    sys.stdout.flush()
    return not should_stop()


# --- trials: one per process, or many in a persistent program ---------------------------------------

END_PREFIX = "hpctune-trial-end"


class Trial(object):
    """The trial being run (trials() yields it): its id, its attempt, and whether it was asked to stop."""

    def __init__(self, trial_id, attempt):
        self.id = trial_id
        self.attempt = attempt
        self._stopped = False

    @property
    def stopped(self):
        """True once hpctune asked this trial to stop (leave the epoch loop)."""
        if not self._stopped and _channel is not None and _current is self:
            _channel.poll()
        return self._stopped


_current = None  # the Trial trials() yielded last, while its iteration runs
_channel = None  # the persistent program's control connection


class _Channel(object):
    """The connection to hpctune (HPCTUNE_CONTROL, a Unix socket, with HPCTUNE_CONTROL_TOKEN): a JSON
    line per message; a trial {"trial", "attempt", "env", "unset"} or a stop {"stop", "attempt"}."""

    def __init__(self, path, token):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.sendall((json.dumps({"token": token, "rank": rank()}) + "\n").encode())
        self.buf = b""
        self.woken = False
        self.handler = False
        if threading.current_thread() is threading.main_thread():
            # SIGUSR1 comes with every stop: the handler only sets a flag, read by should_stop().
            signal.signal(signal.SIGUSR1, self._wake)
            self.handler = True

    def _wake(self, signum, frame):
        self.woken = True

    def _messages(self, block):
        """The whole lines received (waiting for one when `block`); None when hpctune is gone."""
        while b"\n" not in self.buf:
            if not block and not select.select([self.sock], [], [], 0)[0]:
                return []
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data
        lines, _, self.buf = self.buf.rpartition(b"\n")
        return [json.loads(line) for line in lines.split(b"\n") if line.strip()]

    def _apply_stop(self, message):
        t = _current
        if t is not None and message.get("stop") == t.id and message.get("attempt", t.attempt) == t.attempt:
            t._stopped = True

    def poll(self):
        """Reads the stops that came (without waiting) when a signal said so, or always without a handler."""
        if self.handler and not self.woken:
            return
        self.woken = False
        for message in self._messages(False) or []:
            if "stop" in message:
                self._apply_stop(message)

    def next_trial(self):
        """Waits for the next trial's message; None when hpctune closed the connection."""
        while True:
            messages = self._messages(True)
            if messages is None:
                return None
            trial = None
            for message in messages:
                if "trial" in message:
                    trial = message
                elif trial is not None and "stop" in message and message.get("stop") == trial["trial"]:
                    trial["stopped"] = True
            if trial is not None:
                return trial


def _env_int(name):
    text = os.environ.get(name, "")
    return int(text) if text else None


def trials():
    """Yields each trial this program is to run, a Trial. Run by hpctune without persistent (or not
    by hpctune at all): once, from the environment. With trainer.persistent: once per trial hpctune
    hands this process; every accessor (params(), trial_id(), checkpoint_dir(), ...) and os.environ
    then answer for the current one. Leave your epoch loop when report() returns False (the trial
    was asked to stop); the next iteration tells hpctune that the trial ended. Breaking out of the
    loop ends the trial when the program exits."""
    global _current, _channel
    path = os.environ.get("HPCTUNE_CONTROL", "")
    if not path:
        _current = Trial(trial_id(), _env_int("HPCTUNE_ATTEMPT"))
        try:
            yield _current
        finally:
            _current = None
        return
    _channel = _Channel(path, os.environ.get("HPCTUNE_CONTROL_TOKEN", ""))
    try:
        while True:
            message = _channel.next_trial()
            if message is None:
                return
            os.environ.update(message.get("env", {}))
            for name in message.get("unset", []):
                os.environ.pop(name, None)
            trial = Trial(message["trial"], message.get("attempt"))
            trial._stopped = bool(message.get("stopped"))
            _current = trial
            try:
                yield trial
            except GeneratorExit:
                # The loop was left (break, an exception): no end line; the trial ends when the
                # program exits, with its exit code.
                _current = None
                raise
            _current = None
            sys.stderr.flush()
            # On every rank: hpctune sends the next trial once all ranks have ended this one.
            end = {"trial": trial.id, "attempt": trial.attempt, "status": "stopped" if trial._stopped else "done"}
            sys.stdout.write(END_PREFIX + " " + json.dumps(end) + "\n")
            sys.stdout.flush()
    finally:
        _channel.sock.close()
        _channel = None


def should_stop():
    """True once the current trial was asked to stop (a persistent program; without persistent, a
    stop is SIGTERM, which ends the program as before)."""
    t = _current
    return t is not None and t.stopped


# --- workflows: an ensemble stage reads the program's predictions, a transfer stage gives it a source ---


def fold_seed(value):
    """A seed of any size as one below 2**32 that every library takes (numpy.random.RandomState,
    random.seed, torch.manual_seed, and seed * 1000 + epoch in a torch.Generator): the xor of its
    low and high 32 bits (of its 64-bit two's complement), so a value below 2**32 is itself and
    the high half of a 64-bit one still counts. Not a hash: hpctune's seeds are already mixed."""
    value = int(value) & 0xFFFFFFFFFFFFFFFF
    return (value ^ (value >> 32)) & 0xFFFFFFFF


def seed():
    """The trial's own seed, below 2**32 (fold_seed of HPCTUNE_SEED, which is 64-bit), for
    initialisation and shuffling; None when not run by hpctune. Every rank of a trial gets the same."""
    text = os.environ.get("HPCTUNE_SEED", "")
    return fold_seed(text) if text else None


def data_seed():
    """The campaign's data seed, below 2**32 (fold_seed of HPCTUNE_DATA_SEED, which is 64-bit);
    None when not run by hpctune. The same for every trial of a campaign, so draw the validation
    split from it (and the trial's own randomness from seed())."""
    text = os.environ.get("HPCTUNE_DATA_SEED", "")
    return fold_seed(text) if text else None


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
