#!/usr/bin/python3
"""Mixes malformed report lines with good ones; the good ones are steps 1, 2 and 5."""
import sys

lines = [
    'hpctune-report {"step": 1, "val_accuracy": 0.1}',
    "hpctune-report {not json",
    'hpctune-report [1, 2, 3]',
    'hpctune-report {"step": 2, "val_accuracy": "high"}',
    'hpctune-report {"step": 2, "val_accuracy": true}',
    'hpctune-report {"step": -1, "val_accuracy": 0.9}',
    'hpctune-report {"step": 2}',
    "hpctune-report",
    "an ordinary line",
    'hpctune-report {"step": 2, "val_accuracy": 0.2, "loss": 1.5}',
    'hpctune-reportX {"step": 9, "val_accuracy": 0.99}',
    'hpctune-report {"step": 5, "val_accuracy": 0.5}',
    "hpctune-report 42",
]
for line in lines:
    sys.stdout.write(line + "\n")
sys.stdout.flush()
