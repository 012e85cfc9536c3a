#!/usr/bin/env bash
# Start a TLS Dask cluster over SSH: a scheduler on the first host, one worker on each other
# host (repeat a host to run several). Every host needs the scalenc environment (same Python,
# dask, distributed, numpy and scalenc versions) and the certificates at $CERTS.
#
#   deploy/tls/make-certs.sh ~/scalenc-certs node1 node2 node3      # once, then copy:
#   for h in node1 node2 node3; do rsync -a ~/scalenc-certs/ $h:scalenc-certs/; done
#   deploy/ssh/start-cluster.sh node1 node2 node3
#   deploy/ssh/stop-cluster.sh node1 node2 node3
#
# Environment: CERTS (default ~/scalenc-certs, the same path on every host), PORT (8786),
# NTHREADS (worker threads, default 2), MEMORY (worker memory limit, default auto),
# REMOTE_ENV (a command run first on every host, e.g. "source ~/venv/bin/activate").
# The scheduler listens on SCHEDULER_HOST:PORT with TLS only; its dashboard binds
# 127.0.0.1:8787 on that host (reach it with `ssh -L 8787:127.0.0.1:8787 SCHEDULER_HOST`).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: start-cluster.sh SCHEDULER_HOST WORKER_HOST [WORKER_HOST ...]" >&2
  exit 2
fi
scheduler=$1
shift
certs=${CERTS:-'~/scalenc-certs'}
port=${PORT:-8786}
nthreads=${NTHREADS:-2}
memory=${MEMORY:-auto}
prelude=${REMOTE_ENV:-true}
tls() {  # the TLS options of role $1
  echo "--tls-ca-file $certs/ca.pem --tls-cert $certs/$1.pem --tls-key $certs/$1-key.pem"
}

# (the prelude runs first and alone: a backgrounded `prelude && dask ...` would keep ssh's
# output open and ssh would never return)
ssh "$scheduler" "$prelude || exit 1; nohup dask scheduler --protocol tls --host $scheduler \
  --port $port --dashboard-address 127.0.0.1:8787 $(tls scheduler) \
  > scalenc-scheduler.log 2>&1 < /dev/null & echo \$! > scalenc-scheduler.pid"
sleep 3
i=0
for host in "$@"; do
  ssh "$host" "$prelude || exit 1; nohup dask worker tls://$scheduler:$port --name $host-$i \
    --nthreads $nthreads --memory-limit $memory --dashboard-address 127.0.0.1:0 $(tls worker) \
    > scalenc-worker-$i.log 2>&1 < /dev/null & echo \$! >> scalenc-worker.pids"
  i=$((i + 1))
done
echo "scheduler: tls://$scheduler:$port  (logs: ~/scalenc-*.log on each host)"
