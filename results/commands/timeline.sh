#!/usr/bin/env bash
# The article's run and figures on 2 GPUs: ViT-L/32 in strict fp32, batch 32 per GPU, synthetic
# data made by host threads, 25 MiB buckets, 10 warm-up + 20 timed + 1 cool-down steps; once on
# 1 GPU without DDP and once on 2 GPUs with DDP; then the plots of results/vitddp_plot.py: the mean
# time per phase and rank, the compute and comm streams of steps 10-11 with every bucket's
# all-reduce, a zoom on the end of backward, the per-GPU scaling, and the summary table.
# Usage: bash results/commands/timeline.sh OUT   |   bash results/commands/timeline.sh --readme DIR
#   (--readme redraws the figures from DIR's files; it needs matplotlib, no GPU).
# Writes into OUT: vit_l_32-np1-noddp.h5, vit_l_32-np2-25mb.h5, phases.png, timeline.png,
# timeline-end-of-backward.png, scaling.png, summary.md, log.txt, README.md. About 1 minute.
TOPIC=timeline
TITLE="The article's run on 2 GPUs: phases, stream timeline, scaling (ViT-L/32, fp32)"
NEED_GPUS=2
about() {
  cat <<'MD'
ViT-L/32 (306,535,400 parameters), strict fp32, batch 32 per GPU, synthetic data made by 4 host
threads into pinned memory, 25 MiB buckets (38 buckets), 10 warm-up + 20 timed + 1 cool-down
steps: `vit_l_32-np1-noddp` (1 GPU, `--no-ddp`: the article's baseline) and `vit_l_32-np2-25mb`
(2 GPUs, DDP). The figures are drawn from the 2-GPU file:

- `phases.png`: mean time of each phase per rank over the timed steps;
- `timeline.png`: the compute and comm streams of steps 10 and 11, every bucket's all-reduce
  labelled with its index; `timeline-end-of-backward.png`: the end of step 10's backward;
- `scaling.png`: per-GPU throughput, 1 GPU without DDP against 2 GPUs with DDP;
- `summary.md`: `vitddp_plot.py summary` of both files.

![timeline](timeline.png)
MD
}
includes() {  # redraw every figure and the summary from the two files
  local d=$1 np2=$1/vit_l_32-np2-25mb.h5 np1=$1/vit_l_32-np1-noddp.h5 plot=("$PY" "$REPO/results/vitddp_plot.py")
  [ -f "$np2" ] || return 0
  {
    "${plot[@]}" summary "$np1" "$np2" -o "$d/summary.md"
    "${plot[@]}" phases "$np2" -o "$d/phases.png"
    "${plot[@]}" timeline "$np2" --steps 10,11 -o "$d/timeline.png"
    "${plot[@]}" timeline "$np2" --steps 10 --xlim 64,76 --width 12 -o "$d/timeline-end-of-backward.png"
    "${plot[@]}" scaling "$np1" "$np2" -o "$d/scaling.png"
  } > /dev/null
  local sec; sec=$(mktemp --suffix .md)
  { echo "## Summary (results/vitddp_plot.py summary)"; echo; cat "$d/summary.md"; } > "$sec"
  echo "$sec"
}
experiment() {
  local steps=(--warmup-steps 10 --steps 20 --cooldown-steps 1 --progress-every 10 --overwrite)
  "${MPI[@]}" -np 1 "$VITDDP" --no-ddp "${steps[@]}" --out "$OUT/vit_l_32-np1-noddp.h5" | grep -E "timed window|error" || status=1
  "${MPI[@]}" -np 2 "$VITDDP" "${steps[@]}" --out "$OUT/vit_l_32-np2-25mb.h5" | grep -E "timed window|error|started after" || status=1
}
source "$(dirname "$0")/lib.sh"
main "$@"
