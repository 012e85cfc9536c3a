#!/usr/bin/env bash
# Stop what start-gpu-cluster.sh started, by the PIDs it recorded in the home directory:
# on this machine (no hosts), or on each host over SSH (the hosts given to the start script).
#
#   deploy/gpu/stop-gpu-cluster.sh [SCHEDULER_HOST GPU_HOST ...]
set -euo pipefail
stop='cd ~ && for f in scalenc-gpu-worker.pids scalenc-gpu-scheduler.pid; do
  [ -f "$f" ] && xargs -r kill < "$f" 2>/dev/null; rm -f "$f"; done; true'
if [[ $# -eq 0 ]]; then
  bash -c "$stop"
fi
for host in $(printf '%s\n' "$@" | sort -u); do
  ssh "$host" "$stop"
done
