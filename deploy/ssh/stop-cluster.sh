#!/usr/bin/env bash
# Stop what start-cluster.sh started (by the PIDs it recorded on each host).
#
#   deploy/ssh/stop-cluster.sh SCHEDULER_HOST WORKER_HOST [WORKER_HOST ...]
set -euo pipefail
for host in $(printf '%s\n' "$@" | sort -u); do
  ssh "$host" 'for f in scalenc-worker.pids scalenc-scheduler.pid; do
      [ -f "$f" ] && xargs -r kill < "$f" 2>/dev/null; rm -f "$f"; done; true'
done
