#!/bin/sh
# Prints $1 report lines as fast as it can (issue 9 item 7: a flood of reports).
exec awk -v n="$1" 'BEGIN { for (i = 1; i <= n; i++) printf "hpctune-report {\"step\": %d, \"val_accuracy\": %.6f}\n", i, i / n }'
