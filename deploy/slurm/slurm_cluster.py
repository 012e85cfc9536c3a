"""Run a scalenc job file on SLURM through dask-jobqueue, with TLS between all parties.

    pip install dask-jobqueue          # in the same environment as scalenc
    deploy/tls/make-certs.sh ~/scalenc-certs      # on the shared file system
    python deploy/slurm/slurm_cluster.py deploy/jobs/job.toml --jobs 4 \\
        --queue normal --account myproject --cores 8 --memory 32GB --walltime 02:00:00

or as a batch job itself: ``sbatch deploy/slurm/scalenc.sbatch``.

The scheduler runs in this process's node, listening with TLS only (workers are SLURM jobs on
other nodes, so it cannot be loopback); its dashboard binds 127.0.0.1:8787 (reach it with
``ssh -L 8787:127.0.0.1:8787 <this node>``). Each SLURM job runs ``--processes`` Dask worker
processes. ``scalenc run`` is then started against the scheduler; its exit code (0 ok,
2 bad input, 3 cluster unreachable, 4 computation failure) is this script's. The job file's
``workdir`` must be on a file system that every node mounts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("job", help="the scalenc job file (TOML)")
    p.add_argument("--jobs", type=int, default=2, help="SLURM worker jobs (default 2)")
    p.add_argument("--queue", help="SLURM partition")
    p.add_argument("--account", help="SLURM account")
    p.add_argument("--cores", type=int, default=8, help="cores per SLURM job")
    p.add_argument("--processes", type=int, default=2, help="Dask workers per SLURM job")
    p.add_argument("--memory", default="32GB", help="memory per SLURM job")
    p.add_argument("--walltime", default="02:00:00")
    p.add_argument("--interface", help="network interface of the workers, e.g. ib0")
    p.add_argument(
        "--certs",
        default=os.path.expanduser("~/scalenc-certs"),
        help="directory from deploy/tls/make-certs.sh, on the shared file system",
    )
    p.add_argument("--log-directory", default="scalenc-slurm-logs")
    return p.parse_args(argv)


def tls_security(certs: Path):
    from distributed.security import Security

    files = {
        "tls_ca_file": "ca.pem",
        "tls_scheduler_cert": "scheduler.pem",
        "tls_scheduler_key": "scheduler-key.pem",
        "tls_worker_cert": "worker.pem",
        "tls_worker_key": "worker-key.pem",
        "tls_client_cert": "client.pem",
        "tls_client_key": "client-key.pem",
    }
    missing = [name for name in files.values() if not (certs / name).is_file()]
    if missing:
        sys.exit(f"{certs} lacks {missing}; run deploy/tls/make-certs.sh {certs}")
    return Security(require_encryption=True, **{k: str(certs / v) for k, v in files.items()})


def client_env(certs: Path, address: str) -> dict:
    """What `scalenc run` needs to reach the TLS scheduler (Dask's own settings)."""
    return {
        **os.environ,
        "SCALENC_SCHEDULER": address,
        "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "true",
        "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(certs / "ca.pem"),
        "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(certs / "client.pem"),
        "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(certs / "client-key.pem"),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    from dask_jobqueue import SLURMCluster

    certs = Path(args.certs).resolve()
    cluster = SLURMCluster(
        queue=args.queue,
        account=args.account,
        cores=args.cores,
        processes=args.processes,
        memory=args.memory,
        walltime=args.walltime,
        interface=args.interface,
        protocol="tls://",
        security=tls_security(certs),
        scheduler_options={"dashboard_address": "127.0.0.1:8787"},
        job_script_prologue=["export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"],
        log_directory=args.log_directory,
    )
    try:
        cluster.scale(jobs=args.jobs)
        print(cluster.job_script(), file=sys.stderr)
        print(
            f"scheduler {cluster.scheduler_address}; dashboard {cluster.dashboard_link}",
            file=sys.stderr,
        )
        run = subprocess.run(
            ["scalenc", "run", args.job, "--connect-timeout", "1800"],
            env=client_env(certs, cluster.scheduler_address),
        )
        return run.returncode
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
