#!/bin/bash
# The GPU check of issue 28, as run on an H200: the tests marked gpu, then benchmarks/gpu.py.
#
#   bash benchmarks/gpu_check.sh [all|tests|bench]
#
# Environment: WHEELS=DIR installs the wheels there first (a machine without an index:
# dask, distributed, zarr, numcodecs, donfig, google-crc32c, partd, locket, toolz, tblib,
# tornado, zict, cloudpickle, array-api-compat, array-api-strict and dask-cuda); OUT=DIR (default ./gpu_out) receives tests.log, diffs.jsonl, bench.log, gpu.json;
# DATA_DIR holds mnist.npz (default ../shared/data); TEST_LIMIT and BENCH_LIMIT bound each
# step in seconds; BENCH_ARGS is passed to benchmarks/gpu.py.
STEP=${1:-all}
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "installing $WHEELS failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import cupy, numpy, dask, zarr; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'dask', dask.__version__, 'zarr', zarr.__version__)"
if [ "$STEP" = all ] || [ "$STEP" = tests ]; then
  # -p no:benchmark: pytest-benchmark warns under xdist, and the suite turns warnings into errors
  SCALENC_GPU_DIFFS=$OUT/diffs.jsonl timeout "${TEST_LIMIT:-300}" python3 -m pytest \
    -p no:cacheprovider -p no:benchmark -q -n 4 --dist load -m gpu \
    -W ignore::DeprecationWarning -W ignore::FutureWarning --timeout 200 -rfE \
    tests/test_gpu.py tests/test_device_nrbfn.py tests/test_device_encoder.py \
    tests/test_device_neighbors.py tests/test_device_ccdr.py 2>&1 | tee "$OUT/tests.log" | tail -60
fi
if [ "$STEP" = all ] || [ "$STEP" = bench ]; then
  # shellcheck disable=SC2086 # BENCH_ARGS holds several arguments
  timeout "${BENCH_LIMIT:-600}" python3 benchmarks/gpu.py --data-dir "${DATA_DIR:-../shared/data}" \
    --json "$OUT/gpu.json" ${BENCH_ARGS} 2>&1 | tee "$OUT/bench.log" | tail -60
fi
