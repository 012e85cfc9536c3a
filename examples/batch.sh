#!/usr/bin/env bash
# A complete batch run with the scalenc command: simulate -> fit -> predict -> evaluate -> report.
# The same steps as examples/job.toml. Each command prints a short summary on stdout (the full
# JSON with --format json; here the JSON is also saved with --json FILE) and a one-line-per-event
# log on stderr, and exits non-zero on failure: 2 bad input, 3 cluster unreachable, 4 failure
# during the computation. `scalenc fit METHOD --help` lists the parameters --set takes.
#
#   bash examples/batch.sh [WORKDIR]          # default WORKDIR: ./scalenc-batch
#   SCALENC_SCHEDULER=local bash examples/batch.sh   # the same on a LocalCluster of processes
set -euo pipefail

SCALENC=${SCALENC:-scalenc}
WORK=${1:-scalenc-batch}
mkdir -p "$WORK"

$SCALENC make-data normal_noise --n 20000 --p 100 --k 5 --seed 0 --chunk-rows 4000 \
    --out "$WORK/train.zarr" --overwrite --json "$WORK/make-train.json"
$SCALENC make-data normal_noise --n 5000 --p 100 --k 5 --seed 1 --chunk-rows 2500 \
    --out "$WORK/test.zarr" --overwrite --json "$WORK/make-test.json"

$SCALENC fit encoder --data "$WORK/train.zarr" --model-out "$WORK/model" --overwrite \
    --set kernels=linear,euclidean,spearman --set min_improvement=0.3 --json "$WORK/fit.json"

$SCALENC predict --model "$WORK/model" --data "$WORK/test.zarr" \
    --out "$WORK/predictions.parquet" --overwrite --json "$WORK/predict.json"

$SCALENC evaluate --model "$WORK/model" --data "$WORK/test.zarr" --json "$WORK/evaluate.json"

$SCALENC report --model "$WORK/model" --data "$WORK/test.zarr" \
    --out "$WORK/report.html" --overwrite --json "$WORK/report.json"

python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
fit = json.load(open(f"{work}/fit.json"))
ev = json.load(open(f"{work}/evaluate.json"))
print(f"kernel {fit['model']['kernel_']}, {fit['passes']} passes, fit {fit['timings']['fit_seconds']}s; "
      f"test accuracy {ev['scores']['accuracy']:.4f}; report: {work}/report.html")
PY
