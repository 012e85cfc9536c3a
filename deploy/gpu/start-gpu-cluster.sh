#!/usr/bin/env bash
# Start a Dask cluster of GPU workers: a scheduler, and on each GPU machine one
# `dask cuda worker` (dask-cuda), which runs a worker process per GPU it sees
# (CUDA_VISIBLE_DEVICES chooses them). It writes a Dask scheduler file.
#
#   deploy/gpu/start-gpu-cluster.sh                       # this machine, on 127.0.0.1 only
#   deploy/gpu/start-gpu-cluster.sh node1 gpu1 gpu2       # over SSH with TLS: scheduler on node1
#   deploy/gpu/stop-gpu-cluster.sh [the same hosts]
#
# With no hosts, the scheduler and the workers listen on 127.0.0.1 of this machine (plain
# tcp: nothing else can reach them). With hosts, as deploy/ssh/start-cluster.sh does: the
# scheduler on the first host listens with TLS only, the workers run on the other hosts
# (name each GPU machine once; repeat the first to put workers there too), every host has
# the scalenc environment and the certificates of deploy/tls/make-certs.sh at $CERTS.
# Every host, and the machine running scalenc, needs scalenc[gpu] (CuPy, dask-cuda).
# The processes run in the home directory of their host, where their logs
# (scalenc-gpu-*.log) and PID files go.
#
# Environment: PORT (8786), NTHREADS (threads per GPU worker, default 1 as dask-cuda
# recommends), MEMORY (host memory limit per GPU worker, default auto: the machine's memory
# shared among its GPUs), DEVICE_MEMORY (the GPU memory above which a worker moves stored
# results to host memory, default 0.8 of the GPU's), SCHEDULER_FILE (default
# ~/scalenc-gpu-scheduler.json, on the scheduler's host), REMOTE_ENV (a command run first on
# every host, e.g. "source ~/venv/bin/activate"), CERTS (with hosts: default ~/scalenc-certs,
# the same path on every host). Dashboards bind 127.0.0.1 (the scheduler's on port 8787).
set -euo pipefail

if [[ $# -eq 1 ]]; then
  echo "usage: start-gpu-cluster.sh [SCHEDULER_HOST GPU_HOST [GPU_HOST ...]]" >&2
  exit 2
fi
port=${PORT:-8786}
nthreads=${NTHREADS:-1}
memory=${MEMORY:-auto}
device_memory=${DEVICE_MEMORY:-0.8}
file=${SCHEDULER_FILE:-'~/scalenc-gpu-scheduler.json'}
certs=${CERTS:-'~/scalenc-certs'}
prelude=${REMOTE_ENV:-true}
tls() {  # the TLS options of role $1
  echo "--tls-ca-file $certs/ca.pem --tls-cert $certs/$1.pem --tls-key $certs/$1-key.pem"
}
if [[ $# -eq 0 ]]; then  # this machine: tcp on loopback, the workers find the scheduler file
  scheduler=127.0.0.1
  set -- 127.0.0.1
  listen="--host 127.0.0.1"
  join="--scheduler-file $file --host 127.0.0.1"
  address=tcp://127.0.0.1:$port
  client="--scheduler-file $file"
  on() { (cd ~ && bash -c "$2"); }
else
  scheduler=$1
  shift
  listen="--protocol tls --host $scheduler $(tls scheduler)"
  join="tls://$scheduler:$port $(tls worker)"
  address=tls://$scheduler:$port
  client="--scheduler $address --tls-dir $certs"
  on() { ssh "$1" "$2"; }
fi

# (the prelude runs first and alone: a backgrounded `prelude && dask ...` would keep ssh's
# output open and ssh would never return; an old scheduler file would send workers astray)
on "$scheduler" "$prelude || exit 1; rm -f $file; nohup dask scheduler $listen --port $port \
  --dashboard-address 127.0.0.1:8787 --scheduler-file $file \
  > scalenc-gpu-scheduler.log 2>&1 < /dev/null & echo \$! > scalenc-gpu-scheduler.pid"
# the scheduler writes its file once it listens
if ! on "$scheduler" "for i in \$(seq 120); do [ -s $file ] && exit 0; sleep 0.5; done; exit 1"; then
  echo "the scheduler did not start on $scheduler; its log, ~/scalenc-gpu-scheduler.log:" >&2
  on "$scheduler" "tail -n 20 scalenc-gpu-scheduler.log" >&2 || true
  exit 1
fi
i=0
for host in "$@"; do
  on "$host" "$prelude || exit 1; nohup dask cuda worker $join --nthreads $nthreads \
    --memory-limit $memory --device-memory-limit $device_memory \
    --dashboard-address 127.0.0.1:0 > scalenc-gpu-worker-$i.log 2>&1 < /dev/null & \
    echo \$! >> scalenc-gpu-worker.pids"
  i=$((i + 1))
done

echo "scheduler: $address (scheduler file $file on $scheduler; logs ~/scalenc-gpu-*.log)"
echo "run scalenc on the GPUs with --device gpu, e.g.:"
echo "  scalenc run deploy/jobs/gpu-job.toml $client"
echo "  scalenc fit encoder --data DATA --model-out MODEL --device gpu $client"
