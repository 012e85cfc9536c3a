"""Preloaded by the test workers of ``tests/engine/test_cluster_churn.py`` (``dask worker --preload``):
each block of a pass sleeps ``$SCALENC_TEST_BLOCK_SLEEP`` seconds and notes the worker's
PID in ``$SCALENC_TEST_MARKERS``, so that a fit is still running when a test kills the
worker; with ``$SCALENC_TEST_BLOCK_HOG`` bytes, each block also holds that much memory
while it sleeps (a task that exceeds its worker's memory limit); the block of X that starts
at row ``$SCALENC_TEST_BLOCK_FATAL`` SIGKILLs its own worker (as the operating system's
out-of-memory killer would, leaving no trace in Dask). Only the workers load it:
the test's own (reference) fits run at full speed.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np

from scalenc.engine import reduce

_plain = reduce._block_partial


def _slow_block_partial(*args, **kwargs):
    fatal = os.environ.get("SCALENC_TEST_BLOCK_FATAL")
    if fatal and args[0].ndim == 2 and args[1][0].start == int(fatal):
        os.kill(os.getpid(), signal.SIGKILL)
    markers = os.environ.get("SCALENC_TEST_MARKERS")
    if markers:
        Path(markers, str(os.getpid())).touch()
    hog = int(os.environ.get("SCALENC_TEST_BLOCK_HOG", "0"))
    held = np.ones(hog // 8) if hog else None  # written, so resident
    time.sleep(float(os.environ.get("SCALENC_TEST_BLOCK_SLEEP", "0")))
    del held
    return _plain(*args, **kwargs)


def dask_setup(worker):  # noqa: ARG001 - the preload hook
    reduce._block_partial = _slow_block_partial
