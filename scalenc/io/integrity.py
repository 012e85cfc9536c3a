"""Damaged Zarr data is found before it is trained on, and named when it is read.

Zarr reads a chunk that is not in the store as the array's fill value, so a lost chunk
file silently becomes rows of zeros. :func:`check_chunks` compares the chunks the store
holds (a listing of keys, no data read) with the chunks the array's shape needs, and
refuses a store with missing chunks unless absent chunks are declared intentional
(Zarr's ``write_empty_chunks=False`` stores none for all-fill chunks). :class:`ReadGuard`
wraps a Zarr array so that a chunk that cannot be decoded (garbage, truncated) raises
:class:`DamagedDataError` naming the store, the array and the rows, instead of a codec's
``RuntimeError`` from deep inside a Dask task.
"""

from __future__ import annotations

import warnings

import numpy as np

from scalenc.exceptions import DamagedDataError, MissingChunksWarning

__all__ = [
    "DamagedDataError",
    "MissingChunksWarning",
    "check_chunks",
    "ReadGuard",
    "describe",
]


#: How many missing chunk keys an error lists.
LISTED = 5


def describe(array) -> str:
    """``'<store>' array '<path>'`` for messages."""
    store = getattr(array, "store", None)
    root = getattr(store, "root", None) or getattr(store, "path", None) or store
    path = getattr(array, "path", "") or getattr(array, "name", "") or ""
    return f"{str(root)!r} array {path.strip('/') or '/'!r}"


def _chunk_grid(array) -> list[tuple[int, ...]]:
    counts = [-(-size // chunk) for size, chunk in zip(array.shape, array.chunks)]
    return [tuple(int(i) for i in index) for index in np.ndindex(*counts)]


def _stored_keys(array) -> set[str] | None:
    """Keys of the chunks the store holds for ``array`` (a listing, no data read), or None
    when the store cannot be listed."""
    try:  # zarr 3: the store's listing of the array's prefix (zarr 2: not listed)
        from zarr.core.sync import sync  # deferred: zarr is imported only for Zarr input

        store, prefix = array.store, array.path.strip("/")
        prefix = f"{prefix}/" if prefix else ""

        async def listing():
            return [key async for key in store.list_prefix(prefix)]

        return {key[len(prefix) :] for key in sync(listing())}
    except Exception:
        return None


def _key(array, index: tuple[int, ...]) -> str:
    return array.metadata.encode_chunk_key(index)


def check_chunks(array, *, allow_missing: bool = False) -> None:
    """Refuse a Zarr array whose store lacks chunks that its shape needs.

    With ``allow_missing`` the absent chunks are read as the fill value, with a
    :class:`MissingChunksWarning`. Sharded arrays are checked shard by shard.
    """
    if getattr(array, "shards", None):
        return  # stored per shard; a missing shard is found by the read guard's count below
    stored = _stored_keys(array)
    if stored is None:
        return
    grid = _chunk_grid(array)
    missing = [index for index in grid if _key(array, index) not in stored]
    if not missing:
        return
    step, n = array.chunks[0], array.shape[0]
    listed = ", ".join(
        f"{_key(array, index)!r} (rows {index[0] * step}–{min((index[0] + 1) * step, n) - 1})"
        for index in missing[:LISTED]
    )
    more = f" and {len(missing) - LISTED} more" if len(missing) > LISTED else ""
    message = (
        f"{describe(array)} is missing {len(missing)} of its {len(grid)} chunks: {listed}{more}. "
        "Zarr would read them as the fill value"
    )
    if allow_missing:
        warnings.warn(f"{message}, as asked (allow_missing_chunks=True).", MissingChunksWarning, 3)
        return
    raise DamagedDataError(
        f"{message}, so the data would be silently wrong. Restore the chunks, or pass "
        "allow_missing_chunks=True (--allow-missing-chunks) if the store was written with "
        "write_empty_chunks=False and absent chunks are intentional."
    )


class ReadGuard:
    """A Zarr array whose reads name the store, the array and the rows when a chunk cannot be
    decoded. Behaves as the array for ``dask.array.from_array``."""

    def __init__(self, array):
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype
        self.ndim = len(array.shape)
        self.chunks = array.chunks

    def _chunk_of(self, row: int) -> str:
        """`` (chunk 'c/3/0')`` for the chunk holding ``row``, when the array can say."""
        try:
            index = (row // self.chunks[0],) + (0,) * (self.ndim - 1)
            return f" (chunk {_key(self.array, index)!r})"
        except Exception:  # noqa: BLE001 - a Zarr version without chunk-key encoding
            return ""

    def __getitem__(self, key):
        try:
            return self.array[key]
        except Exception as exc:
            rows = key[0] if isinstance(key, tuple) else key
            where = (
                f"rows {rows.start}–{rows.stop - 1}{self._chunk_of(rows.start)}"
                if isinstance(rows, slice) and rows.start is not None and rows.stop is not None
                else f"selection {key!r}"
            )
            raise DamagedDataError(
                f"Cannot read {where} of {describe(self.array)}: {type(exc).__name__}: {exc}. "
                "The chunk holding them is damaged (truncated, overwritten or written by "
                "another codec); restore it from a good copy or rewrite the store."
            ) from exc
