"""Count what a computation really does: reads of X's blocks, and the tasks it runs.

``counted(X, chunks)`` gives a Dask array over a NumPy array behind a ``__getitem__``
that records every call, and its :class:`ReadCounter`. Every task that reads a block of
the Dask array calls ``__getitem__`` once with that block's slices, so the counter sees
what the scheduler actually ran, whatever the estimator reports about itself.

:class:`TaskLog` is a Dask callback recording the computes, the tasks run and the size
of each task's result (local schedulers: threads, sync).
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter

import dask.array as da
import numpy as np
from dask.callbacks import Callback
from dask.core import get_dependencies

_IDS = itertools.count()


class CountingArray:
    """Array-like over a NumPy array; each ``__getitem__`` is one read, recorded by rows."""

    def __init__(self, data: np.ndarray):
        self._data = np.asarray(data)
        self.shape = self._data.shape
        self.dtype = self._data.dtype
        self.ndim = self._data.ndim
        self._lock = threading.Lock()
        self._rows: list[tuple[int, int]] = []
        self._id = next(_IDS)

    def __dask_tokenize__(self):
        return ("CountingArray", self._id)

    def __getitem__(self, key):
        rows = key[0] if isinstance(key, tuple) else key
        if isinstance(rows, slice):
            start, stop, _ = rows.indices(self.shape[0])
            span = (start, stop)
        else:  # not a block slice: recorded so that a test sees it
            span = ("other", repr(rows))
        with self._lock:
            self._rows.append(span)
        return self._data[key]

    def reset(self) -> None:
        with self._lock:
            self._rows.clear()

    @property
    def reads(self) -> int:
        with self._lock:
            return len(self._rows)

    def spans(self) -> Counter:
        """How often each row range was read."""
        with self._lock:
            return Counter(self._rows)


class ReadCounter:
    """The reads of one counted Dask array, in units of its row blocks."""

    def __init__(self, array: CountingArray, chunks: tuple[int, ...]):
        self.array = array
        stops = np.cumsum(chunks)
        self.blocks = [(int(stop - size), int(stop)) for size, stop in zip(chunks, stops)]

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def reads(self) -> int:
        return self.array.reads

    def reset(self) -> None:
        self.array.reset()

    def per_block(self) -> list[int]:
        """Reads of each row block, in row order (reads of anything else are refused)."""
        spans = self.array.spans()
        others = set(spans) - set(self.blocks)
        assert not others, f"reads that are not whole row blocks: {sorted(map(str, others))}"
        return [spans[block] for block in self.blocks]

    def passes(self) -> int:
        """Reads / row blocks, after checking that every block was read equally often."""
        counts = self.per_block()
        assert len(set(counts)) == 1, f"row blocks read unequally often: {counts}"
        return counts[0]


def counted(X: np.ndarray, chunks) -> tuple[da.Array, ReadCounter]:
    """``X`` as a Dask array of the given row chunks whose block reads are counted.

    ``chunks`` is a block size or a tuple of row-block sizes; one chunk along columns
    (X may also be 1-D, such as labels).
    """
    wrapper = CountingArray(X)
    arr = da.from_array(
        wrapper,
        chunks=(chunks, -1)[: wrapper.ndim],
        asarray=True,
        lock=False,
        fancy=False,
    )
    wrapper.reset()  # from_array reads an empty slice for its meta: not a read of X
    return arr, ReadCounter(wrapper, arr.chunks[0])


def _size(result) -> int:
    """Elements in a task's result: arrays and numbers, through tuples, lists and dicts."""
    if isinstance(result, dict):
        return sum(_size(v) for v in result.values())
    if isinstance(result, (tuple, list)):
        return sum(_size(v) for v in result)
    return int(np.size(result))


class TaskLog(Callback):
    """Record every compute (its graph) and every task run, with its result's size.

    ``sizes`` maps each task's key to the number of elements of its result.
    """

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()
        self.graphs: list[dict] = []
        self.sizes: dict = {}

    def _start(self, dsk):
        self.graphs.append(dict(dsk))

    def _posttask(self, key, result, dsk, state, worker_id):
        with self._lock:
            self.sizes[key] = _size(result)

    @property
    def computes(self) -> int:
        return len(self.graphs)

    def depth(self, key, among) -> int:
        """Length of the longest chain of tasks in ``among`` ending at ``key`` (1 alone)."""
        graph = self.graphs[-1]
        below = [d for d in get_dependencies(graph, key) if d in among]
        return 1 + max((self.depth(d, among) for d in below), default=0)
