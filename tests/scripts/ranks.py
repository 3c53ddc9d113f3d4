#!/usr/bin/python3
"""A multi-rank training script for the command trainer tests, run under mpirun by hpctune.

Through the helper, only rank 0 reports: val_accuracy = rank + 1 (so 1.0), the world size mpirun
gave and the WORLD_SIZE hpctune gave. The other ranks also print a raw report line of -1, which
hpctune must log and not count. Every rank writes the rendezvous variables hpctune gave it
(trainers/rank_environment.h) into rank-<RANK>.env in the trial directory.
"""
import os

import hpctune_report as hp

NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
with open(os.path.join(hp.trial_dir(), "rank-%s.env" % os.environ["RANK"]), "w") as f:
    f.write(" ".join(os.environ.get(name, "-") for name in NAMES) + "\n")

size = float(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
hp.report(1, val_accuracy=hp.rank() + 1.0, ranks=size, world_size=float(os.environ["WORLD_SIZE"]))
if hp.rank() != 0:
    print('hpctune-report {"step": 2, "val_accuracy": -1}', flush=True)
