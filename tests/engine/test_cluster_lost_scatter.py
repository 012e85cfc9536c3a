"""A worker lost while it holds the only copy of a scattered value.

scalenc sends large block arguments (nRBFN's basis, CCDR's solutions) to the workers once,
with ``Client.scatter(..., broadcast=True)`` (``scalenc.engine.reduce._share``), and NumPy input
as scattered row blocks (``scalenc.io.inputs.from_numpy_rows``). Dask's active memory manager,
on by default, drops all but one copy of broadcast data within seconds, and scattered data
cannot be computed again: when the worker holding the last copy dies, Dask cancels the
computation ("lost dependencies"). :func:`scalenc.engine.cluster.compute` sends the client's
copy again under the same key and computes again, with the NumPy result; data scattered
by other code it cannot send again gives :class:`ClusterUnavailableError` saying what
happened and what to do, instead of Dask's bare ``FutureCancelledError``.

Real components: a LocalCluster of worker processes with nannies on 127.0.0.1, and a
worker killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import time

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import loopback_cluster

from scalenc.engine.cluster import ClusterUnavailableError, compute
from scalenc.engine.reduce import _share

pytestmark = pytest.mark.cluster

AMM = "distributed.scheduler.active-memory-manager.start"


def _holders(client, future, want, timeout=20.0):
    """Workers holding ``future``'s key, once there are ``want`` of them."""
    deadline = time.monotonic() + timeout
    while True:
        holders = client.who_has([future])[future.key]
        if len(holders) == want or time.monotonic() > deadline:
            return holders
        time.sleep(0.2)


def _scaled_sum(x, weights):
    return x * weights[0, 0]


def _kill_worker(client, address):
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while address in client.scheduler_info(n_workers=-1)["workers"]:
        assert time.monotonic() < deadline, "the killed worker is still listed"
        time.sleep(0.1)


def _cluster(amm: bool):
    from distributed import Client

    with dask.config.set({AMM: amm}):  # read by the scheduler when it starts
        cluster = loopback_cluster()
    return cluster, Client(cluster)


@pytest.mark.timeout(180)
# without Active Memory Manager: CI's slow run (a cluster each, 10-30 s)
@pytest.mark.parametrize("amm", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_a_lost_scattered_value_is_sent_again(amm):
    weights = np.random.default_rng(0).normal(size=(1000, 500))  # 4 MB: scattered
    X = np.arange(400.0).reshape(40, 10)
    cluster, client = _cluster(amm)
    try:
        future = _share(weights, client, True)
        assert type(future).__name__ == "Future"
        # the manager keeps one copy; without it, both workers keep theirs
        holders = _holders(client, future, want=1 if amm else 2)
        assert len(holders) == (1 if amm else 2), holders
        out = da.from_array(X, chunks=(10, 10)).map_blocks(_scaled_sum, future, dtype=float)
        _kill_worker(client, next(iter(holders)))
        (total,) = compute(out.sum())
        assert total == pytest.approx(X.sum() * weights[0, 0], rel=1e-12)
    finally:
        client.close()
        cluster.close()


@pytest.mark.timeout(180)
def test_lost_numpy_row_blocks_are_sent_again():
    from scalenc.io.inputs import from_numpy_rows

    X = np.random.default_rng(1).normal(size=(40_000, 20))  # 6.4 MB: scattered blocks
    cluster, client = _cluster(True)
    try:
        Xd = from_numpy_rows(X, 10_000)
        assert Xd.numblocks[0] == 4
        holders = set().union(*client.who_has().values())
        assert len(holders) == 2  # both workers hold some blocks
        _kill_worker(client, sorted(holders)[0])
        (sums,) = compute(Xd.sum(axis=0))
        np.testing.assert_allclose(sums, X.sum(axis=0), rtol=1e-12)
    finally:
        client.close()
        cluster.close()


@pytest.mark.timeout(180)
def test_scattered_data_the_client_cannot_send_again_is_a_clear_error():
    weights = np.random.default_rng(0).normal(size=(1000, 500))
    X = np.arange(400.0).reshape(40, 10)
    cluster, client = _cluster(True)
    try:
        (future,) = client.scatter([weights], broadcast=True, hash=False)  # not scalenc's
        holders = _holders(client, future, want=1)
        out = da.from_array(X, chunks=(10, 10)).map_blocks(_scaled_sum, future, dtype=float)
        _kill_worker(client, next(iter(holders)))
        with pytest.raises(
            ClusterUnavailableError,
            match=r"only copy of data that was sent to the cluster once",
        ) as info:
            compute(out.sum())
        message = str(info.value)
        assert "Nothing was written as complete" in message
        assert AMM in message and "lost dependencies" in message
    finally:
        client.close()
        cluster.close()
