"""A checkpointed fit run as its own process, for the tests that kill it (SIGKILL).

``_checkpoint_job.main([METHOD, DATA, CHECKPOINT, OUT, (SCHEDULER_FILE)])`` loads DATA (a Zarr group), reads
each row block through :func:`logged_rows` (a pause of ``$SCALENC_TEST_BLOCK_DELAY``
seconds, and a line ``start stop`` appended to ``$SCALENC_TEST_READ_LOG``), fits METHOD
(``lrc`` or ``nrbfn``) with ``checkpoint=CHECKPOINT`` and saves the fitted arrays to OUT
(``.npz``), on the cluster of SCHEDULER_FILE if given. The test process builds the same graph with :func:`open_logged`, so both
processes' fits have the same input identity and the test counts the blocks its resumed
fit reads.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

DELAY_ENV = "SCALENC_TEST_BLOCK_DELAY"
LOG_ENV = "SCALENC_TEST_READ_LOG"


def logged_rows(block, block_info=None):
    """The block itself, after a pause; its row range appended to the read log."""
    delay = float(os.environ.get(DELAY_ENV, "0") or 0)
    if delay:
        time.sleep(delay)
    log = os.environ.get(LOG_ENV)
    if log and block_info is not None:
        start, stop = block_info[0]["array-location"][0]
        with open(log, "a") as fh:
            fh.write(f"{start} {stop}\n")
    return block


def open_logged(path):
    """(X, y) of the Zarr group at ``path``, X's blocks read through :func:`logged_rows`."""
    from scalenc import load

    X, y = load(path)
    return X.map_blocks(logged_rows, dtype=X.dtype, meta=X._meta), y


def estimator(method: str, checkpoint):
    from scalenc import LRClassifier, NRBFNClassifier

    if method == "lrc":
        return LRClassifier(checkpoint=checkpoint)
    return NRBFNClassifier(checkpoint=checkpoint, n_basis=40, random_state=0)


def fitted_arrays(model) -> dict:
    weights = model.weights_ if hasattr(model, "weights_") else model.coef_
    return {"weights": np.asarray(weights), "classes": np.asarray(model.classes_)}


def main(argv):
    method, data, checkpoint, out, *scheduler_file = argv
    X, y = open_logged(data)
    if scheduler_file:  # on the cluster of that scheduler file
        import distributed

        with distributed.Client(scheduler_file=scheduler_file[0]):
            model = estimator(method, checkpoint).fit(X, y)
    else:
        model = estimator(method, checkpoint).fit(X, y)
    np.savez(out, **fitted_arrays(model))


if __name__ == "__main__":
    main(sys.argv[1:])
