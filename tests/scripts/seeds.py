#!/usr/bin/python3
"""The helper's seeds as each rank sees them, for test_command_trainer: every rank writes
"<seed()> <data_seed()>" into seeds-rank-<RANK>.txt in the trial directory, and rank 0 reports them
and checks that the libraries the issue named accept them (random.Random, numpy's RandomState when
numpy is there, and seed * 1000 + epoch below 2**63 for a torch.Generator)."""
import os
import random

import hpctune_report as hp

seed, data_seed = hp.seed(), hp.data_seed()
with open(os.path.join(hp.trial_dir(), "seeds-rank-%d.txt" % hp.rank()), "w") as f:
    f.write("%d %d\n" % (seed, data_seed))
random.Random(seed)
accepted = 1.0
try:
    import numpy as np
    np.random.RandomState(seed)
    np.random.RandomState(data_seed)
except ImportError:
    pass
except ValueError:
    accepted = 0.0
if seed * 1000 + 999 >= 2 ** 63:
    accepted = 0.0
hp.report(1, seed=float(seed), data_seed=float(data_seed), accepted=accepted)
