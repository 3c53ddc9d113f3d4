#!/usr/bin/env python3
"""A pure-Python "training" program for the checkpoint side of the command trainer's contract
(tests/test_command_checkpoints.cpp).

Its "weights" are 4 floats pulled towards a fixed target at rate `lr` each step (a parameter); its
score (to maximize) is minus their squared distance to the target. Each step it saves its checkpoint
atomically into HPCTUNE_CHECKPOINT_DIR (state.json with the weights and the step, and
blob/bytes.bin, a subdirectory: the checkpoint is a tree), then reports the step. It trains to
HPCTUNE_MAX_STEP (or --steps) and exits 0; it loops over hp.trials(), so that with trainer.persistent
one process trains trial after trial.

Every attempt appends one JSON line to <trial_dir>/loads.jsonl: the attempt, HPCTUNE_RESUME_FROM,
the sha256 and the bytes (hex) of every file it loaded from there (by relative path), the step it started from, the
params it trained with (HPCTUNE_PARAMS), HPCTUNE_MAX_STEP and its pid.
"""
import argparse
import hashlib
import json
import os
import struct
import time

import hpctune_report as hp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--diverge-trial", type=int, default=0, help="this trial's first attempt reports NaN (hp.report)")
args = parser.parse_args()

TARGET = [1.0, -2.0, 0.5, 3.0]


def save_atomically(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def train_trial():
    params = hp.params()
    lr = float(params["lr"])
    ckpt = hp.checkpoint_dir()
    source = hp.resume_from()
    end = hp.max_step() or args.steps

    state = {"step": 0, "w": [0.0, 0.0, 0.0, 0.0]}
    loaded = {}
    if source is not None:
        for root, _dirs, files in os.walk(source):
            for name in files:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    data = f.read()
                loaded[os.path.relpath(path, source)] = {"sha256": hashlib.sha256(data).hexdigest(), "hex": data.hex()}
        with open(os.path.join(source, "state.json")) as f:
            state = json.load(f)
        with open(os.path.join(source, "blob", "bytes.bin"), "rb") as f:
            struct.unpack("<4d", f.read())  # written before state.json: one step ahead after a kill between

    record = {"attempt": int(os.environ.get("HPCTUNE_ATTEMPT", "1")), "resume_from": source or "",
              "checkpoint_dir": ckpt, "loaded": loaded, "start_step": state["step"], "params": params,
              "max_step": hp.max_step(), "pid": os.getpid()}
    with open(os.path.join(hp.trial_dir(), "loads.jsonl"), "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")

    if state["step"] >= end and "score" in state:
        # Resumed at the step to train to (the attempt that reached it was lost before its report
        # counted): that step's report again, so that the stage sees the boundary.
        hp.report(state["step"], score=state["score"])

    for step in range(state["step"] + 1, end + 1):
        state["w"] = [w + lr * (t - w) for w, t in zip(state["w"], TARGET)]
        state["step"] = step
        state["score"] = -sum((w - t) ** 2 for w, t in zip(state["w"], TARGET))
        save_atomically(os.path.join(ckpt, "blob", "bytes.bin"), struct.pack("<4d", *state["w"]))
        save_atomically(os.path.join(ckpt, "state.json"), json.dumps(state).encode())
        diverged = hp.trial_id() == args.diverge_trial and record["attempt"] == 1
        if not hp.report(step, score=float("nan") if diverged else state["score"]):
            break  # asked to stop (a persistent program; without it a stop is SIGTERM)
        if args.sleep > 0:
            time.sleep(args.sleep)


for _trial in hp.trials():
    train_trial()
