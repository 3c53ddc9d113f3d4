#!/usr/bin/python3
"""A training script for hpctune's command trainer tests: one report per epoch.

val_accuracy rises with the epoch towards a ceiling set by --lr (best at lr = 0.1), so ASHA can
rank trials at every rung. With --check-env it also reports what reached it through the protocol.
"""
import argparse
import json
import math
import os
import time

import hpctune_report as hp

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--layers", type=str, default="[]")
parser.add_argument("--name", type=str, default="")
parser.add_argument("--check-env", action="store_true")
args = parser.parse_args()

ceiling = 1.0 - abs(math.log10(args.lr) + 1.0) / 4.0
for epoch in range(1, args.epochs + 1):
    time.sleep(args.sleep)
    print("epoch %d done" % epoch, flush=True)  # ordinary output: goes to the trial's stdout.log
    metrics = {"val_accuracy": ceiling * (1.0 - 0.5 ** epoch)}
    if args.check_env:
        p = hp.params()
        metrics.update(
            lr_arg=args.lr,
            lr_param=p["lr"],
            layer_count=len(json.loads(args.layers)),
            layer_sum=sum(json.loads(args.layers)),
            name_len=len(args.name),
            name_ok=float(args.name == p.get("name")),
            trial_id=hp.trial_id(),
            trial_dir_ok=float(hp.trial_dir() == os.environ["EXPECTED_TRIAL_DIR"] and os.path.isdir(hp.trial_dir())),
            cwd_ok=float(os.getcwd() == os.path.realpath(os.environ["EXPECTED_CWD"])),
            extra_env=float(os.environ.get("EXTRA", "0")),
        )
    hp.report(epoch, **metrics)
