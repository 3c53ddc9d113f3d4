#!/usr/bin/python3
"""Reports once, writes 30 numbered lines to standard error, and exits with code 3."""
import sys

import hpctune_report as hp

hp.report(1, val_accuracy=0.5)
for i in range(1, 31):
    sys.stderr.write("stderr line %d\n" % i)
sys.stderr.write("ValueError: the data went missing\n")
sys.exit(3)
