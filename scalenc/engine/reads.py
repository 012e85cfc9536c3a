"""Passes over X, counted where X is read: the one place ``n_passes_`` comes from.

A fit runs its steps inside :func:`counting_passes` on its prepared X. Every graph that
:func:`~scalenc.engine.reduce.reduce_rows` builds over X (or over an array computed
from X) is registered as a reader of X when it is built (its optimised graph may no
longer name X's layer), and :func:`note_computation`, called by
:func:`~scalenc.engine.cluster.compute` (and by the row cache when it persists an array
on a cluster), counts one pass for each computation whose graphs read X: a registered
reader, or X's own blocks. Graphs that read only y, or a cache of X's embedding, do not
count. (The estimators compute at most one reduction over X at a time, or several over
one array computed from X whose blocks they share.)

A pass a resumed fit reads back from its checkpoint instead of reading X is not counted,
but it keeps its place: :func:`latest` numbers each computation as the fit's pass it is
(``pass 4`` after three passes read back), which is what the command's progress shows.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

from dask.base import is_dask_collection

__all__ = [
    "PassCount",
    "Computation",
    "counting_passes",
    "note_reader",
    "note_computation",
    "latest",
    "passes_so_far",
    "note_read_back",
    "dask_collections",
]


class PassCount:
    """The passes over one array (by its Dask layer) computed while it is counted."""

    def __init__(self, layer: str):
        self.layer = layer
        self.passes = 0
        self.read_back = 0  # passes a checkpoint gave back instead of reading X
        self._readers: set = set()
        self._read_back: set = set()

    def derives_from_x(self, arr) -> bool:
        """Whether ``arr``'s graph holds the counted array (it is X, or computed from X)."""
        layers = getattr(arr.__dask_graph__(), "layers", None)
        return self.layer in layers if layers is not None else arr.name == self.layer

    def read_by(self, collections: Iterable) -> bool:
        """Whether computing ``collections`` reads the counted array."""
        for collection in collections:
            graph = collection.__dask_graph__()
            layers = getattr(graph, "layers", None)
            if layers is not None and self.layer in layers:
                return True
            for key in graph.keys():
                name = key[0] if isinstance(key, tuple) else key
                if key in self._readers or name == self.layer:
                    return True
        return False

    def reads_back(self, collections: Iterable) -> bool:
        """Whether computing ``collections`` gives a pass back from a checkpoint."""
        return any(
            key in self._read_back
            for collection in collections
            for key in collection.__dask_graph__().keys()
        )


class Computation:
    """What one computation is to the fit counting it: its ``number`` among the fit's
    passes (None: not a pass, such as a pass over the labels), and whether the pass is
    ``read_back`` from a checkpoint instead of reading X."""

    def __init__(self, number: int | None, read_back: bool = False):
        self.number = number
        self.read_back = read_back


#: The last computation :func:`note_computation` saw, None outside a counted fit; a plain
#: value so that the thread polling a distributed scheduler sees it too.
_LATEST: list[Computation | None] = [None]


_COUNTS: contextvars.ContextVar[tuple[PassCount, ...]] = contextvars.ContextVar(
    "scalenc_pass_counts", default=()
)


@contextlib.contextmanager
def counting_passes(X) -> Iterator[PassCount]:
    """Count the passes over the Dask array ``X`` computed inside the block (none when
    ``X`` is None: a fit without X, such as the encoder's on a graph alone).

    Examples
    --------
    >>> import dask.array as da
    >>> from scalenc.engine.cluster import compute
    >>> from scalenc.engine.reads import counting_passes
    >>> X = da.ones((10, 2), chunks=(5, 2))
    >>> with counting_passes(X) as count:
    ...     _ = compute(X.sum())  # one pass
    ...     _ = compute(X.max(), (2 * X).min())  # computed together: X read once
    ...     _ = compute(da.ones(3).sum())  # does not read X
    >>> count.passes
    2
    """
    count = PassCount(None if X is None else X.name)  # None: a fit without X reads none
    token = _COUNTS.set((*_COUNTS.get(), count))
    try:
        yield count
    finally:
        _COUNTS.reset(token)


def note_reader(source, result, *, read_back: bool = False) -> None:
    """Register ``result`` (a Delayed whose computation reads every block of ``source``)
    as a reader of each counted array ``source`` derives from; with ``read_back``, as
    the pass over ``source`` a checkpoint gives back instead (not a read of it)."""
    for count in _COUNTS.get():
        if count.derives_from_x(source):
            (count._read_back if read_back else count._readers).add(result.key)


def note_computation(collections: Iterable) -> None:
    """Count the passes over each counted array that computing ``collections`` performs,
    and note what the computation is to the outermost count, the fit's (:func:`latest`):
    an inner count, such as the encoder's reads of its cached embedding, only counts."""
    counts = _COUNTS.get()
    if not counts:
        _LATEST[0] = None
        return
    collections = list(dask_collections(collections))
    for depth, count in enumerate(counts):
        if count.read_by(collections):
            count.passes += 1
            computation = Computation(count.passes + count.read_back)
        elif count.reads_back(collections):
            count.read_back += 1
            computation = Computation(count.passes + count.read_back, read_back=True)
        else:
            computation = Computation(None)
        if depth == 0:
            _LATEST[0] = computation


def passes_so_far() -> int:
    """The passes over X the innermost counted fit has computed so far (0 outside one)."""
    counts = _COUNTS.get()
    return counts[-1].passes if counts else 0


def note_read_back(passes: int) -> None:
    """``passes`` passes over X that a checkpoint gave back without a computation (a
    remembered result): they keep their place in the fit's numbering."""
    for count in _COUNTS.get():
        count.read_back += passes


def latest() -> Computation | None:
    """What the computation started last is to the fit counting its passes (its pass
    number, or not a pass), or None outside a counted fit."""
    return _LATEST[0]


def dask_collections(values) -> Iterator:
    """The Dask collections in ``values``, looking inside lists, tuples and dicts as
    ``dask.compute`` does."""
    for value in values:
        if is_dask_collection(value):
            yield value
        elif isinstance(value, (list, tuple, set)):
            yield from dask_collections(value)
        elif isinstance(value, dict):
            yield from dask_collections(value.values())
