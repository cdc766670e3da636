#!/usr/bin/env bash
# Renders the plots and the results table of the issue 1 run on 2 x H200 (no GPU needed).
# Run from the repository root: bash results/commands/plots_issue1.sh
set -euo pipefail
D=results/2026-11-30-issue1-2xH200
PLOT="python3 results/vitddp_plot.py"
$PLOT summary "$D/vit_l_32-np1-noddp.h5" "$D/vit_l_32-np2-25mb.h5" -o "$D/summary.md"
$PLOT phases "$D/vit_l_32-np2-25mb.h5" -o "$D/phases.png"
$PLOT timeline "$D/vit_l_32-np2-25mb.h5" --steps 10,11 -o "$D/timeline.png"
$PLOT timeline "$D/vit_l_32-np2-25mb.h5" --steps 10 --xlim 64,76 --width 12 -o "$D/timeline-end-of-backward.png"
$PLOT scaling "$D/vit_l_32-np1-noddp.h5" "$D/vit_l_32-np2-25mb.h5" -o "$D/scaling.png"
