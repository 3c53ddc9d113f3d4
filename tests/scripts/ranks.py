#!/usr/bin/python3
"""A multi-rank training script for the command trainer tests, run under mpirun by hpctune.

Through the helper, only rank 0 reports: val_accuracy = rank + 1 (so 1.0) and the world size. The
other ranks also print a raw report line of -1, which hpctune must log and not count.
"""
import os

import hpctune_report as hp

size = float(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
hp.report(1, val_accuracy=hp.rank() + 1.0, ranks=size)
if hp.rank() != 0:
    print('hpctune-report {"step": 2, "val_accuracy": -1}', flush=True)
