"""Loops over the row tiles of a block: partials merged left to right
(:func:`over_row_tiles`), or outputs written into one array of the block's rows
(:func:`map_row_tiles`), so that a function's temporaries stay tile-sized whatever the
block's rows. NumPy or device blocks alike (:mod:`scalenc.math.xp`).
"""

from __future__ import annotations

import numpy as np

from scalenc.math.xp import device_of, namespace

__all__ = ["over_row_tiles", "map_row_tiles", "add_tuples"]


def add_tuples(a: tuple, b: tuple) -> tuple:
    """Element-wise sum of two tuples of per-kernel totals."""
    return tuple(x + y for x, y in zip(a, b))


def over_row_tiles(func, merge, X, codes, rows: int):
    """``func(X_tile, codes_tile)`` over row tiles of ``rows``, merged left to right."""
    out = None
    for start in range(0, max(X.shape[0], 1), rows):
        stop = min(start + rows, X.shape[0])  # in bounds, as the array API wants
        part = func(X[start:stop, ...], codes[start:stop])
        out = part if out is None else merge(out, part)
    return out


def map_row_tiles(func, X, rows: int) -> np.ndarray:
    """``func(X_tile)`` over row tiles of ``rows``, written into one output for the block
    (its shape and dtype from the first tile's result): the temporaries of ``func`` stay
    tile-sized while the output has the block's rows."""
    n = X.shape[0]
    if n <= rows:
        return func(X)
    first = func(X[:rows, ...])
    # the output's namespace is the first tile's: device labels may come back as NumPy
    xp = namespace(first)
    out = xp.empty((n, *first.shape[1:]), dtype=first.dtype, device=device_of(first))
    out[:rows, ...] = first
    for start in range(rows, n, rows):
        stop = min(start + rows, n)
        out[start:stop, ...] = func(X[start:stop, ...])
    return out
