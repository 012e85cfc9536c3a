"""The streaming layer: tree reductions, row offsets, block maps."""

import threading

import dask
import dask.array as da
import numpy as np
import pytest
from _counting import TaskLog, counted

from scalenc.engine import passes
from scalenc.engine.cluster import compute


def _rows_and_sum(X, codes, *, row_start):
    return {
        "rows": np.array([row_start, row_start + X.shape[0]]),
        "sum": X.sum(0),
        "first": np.array([row_start]),
    }


def _combine_spans(*parts):
    return {
        "rows": np.array([min(p["rows"][0] for p in parts), max(p["rows"][1] for p in parts)]),
        "sum": sum(p["sum"] for p in parts),
        "first": min(p["first"] for p in parts),
    }


def test_reduce_rows_passes_global_row_offsets():
    X = da.from_array(np.arange(100.0).reshape(50, 2), chunks=((7, 13, 20, 10), 2))
    (out,) = compute(passes.reduce_rows(_rows_and_sum, X, None, combine=_combine_spans))
    np.testing.assert_array_equal(out["rows"], [0, 50])
    np.testing.assert_array_equal(out["sum"], np.arange(100.0).reshape(50, 2).sum(0))


def _count_rows(X, *, row_start):
    return np.array(X.shape[0])


def _rows_and_depth(X, *, row_start):
    return {"rows": X.shape[0], "depth": 0}


@pytest.mark.parametrize(
    "n_blocks,split_every,depth,merges",
    [(1, 8, 0, 0), (8, 8, 1, 1), (9, 8, 2, 2), (100, 4, 4, 25 + 6 + 2 + 1)],
)
def test_reduction_is_a_tree(n_blocks, split_every, depth, merges):
    """Partials are merged when the graph is computed, by a counting ``combine``: each call
    merges 2 to ``split_every`` partials, n_blocks − 1 partials are merged away in all, and
    the merges are ⌈log_s(blocks)⌉ deep (a linear chain would be n_blocks − 1 deep)."""
    fan_ins = []

    def combine(*parts):
        fan_ins.append(len(parts))
        return {
            "rows": sum(part["rows"] for part in parts),
            "depth": 1 + max(part["depth"] for part in parts),
        }

    X = da.ones((n_blocks * 3, 2), chunks=(3, 2))
    result = passes.reduce_rows(_rows_and_depth, X, combine=combine, split_every=split_every)
    assert fan_ins == []  # the tree is in the graph: nothing is merged before the compute
    (out,) = compute(result)
    assert out == {"rows": n_blocks * 3, "depth": depth}
    assert len(fan_ins) == merges
    assert all(2 <= fan_in <= split_every for fan_in in fan_ins)
    assert sum(fan_in - 1 for fan_in in fan_ins) == n_blocks - 1


def test_tree_reduce_rejects_bad_fan_in():
    with pytest.raises(ValueError, match="split_every must be at least 2"):
        passes.tree_reduce([dask.delayed(1)], split_every=1)


def test_column_chunks_are_refused_by_passes():
    X = da.ones((10, 4), chunks=(5, 2))
    with pytest.raises(ValueError, match=r"single chunk along its columns.*rechunk"):
        passes.reduce_rows(_count_rows, X)


def test_class_moments_pass_matches_numpy_and_counts_nonfinite():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    X[5, 0] = np.nan
    codes = rng.integers(-1, 3, 120)
    Xd = da.from_array(X, chunks=(25, 3))
    cd = da.from_array(codes, chunks=25)
    (m,) = compute(passes.class_moments_pass(Xd, cd, 3, scatter=True))
    assert m["nonfinite"] == 1 and m["rows"] == 120
    np.testing.assert_array_equal(m["n"], [np.sum(codes == k) for k in range(3)])


def _double(X):
    return 2 * X


def test_map_rows_is_lazy_and_blockwise():
    X = da.from_array(np.arange(12.0).reshape(6, 2), chunks=(4, 2))
    out = passes.map_rows(_double, X, 2, np.float64)
    assert isinstance(out, da.Array) and out.chunks == ((4, 2), (2,))
    np.testing.assert_array_equal(out.compute(), 2 * np.arange(12.0).reshape(6, 2))
    vec = passes.map_rows(lambda b: b[:, 0], X, None, np.float64)
    assert vec.chunks == ((4, 2),)


def _scale(X, *, w):
    return X * w


def _copies_in_graph(collection, value: np.ndarray) -> int:
    """Graph entries whose serialised form holds the bytes of ``value`` (what would be
    shipped to the workers): one when the tasks refer to a single copy by key."""
    import cloudpickle

    data = value.tobytes()
    return sum(
        data in cloudpickle.dumps(task) for task in dict(collection.__dask_graph__()).values()
    )


def _thread(X, *, row_start):
    return np.array([threading.get_ident()])


def test_one_row_block_runs_on_the_calling_thread():
    """A computation over one row block runs here, without Dask's pool; over two blocks,
    on the pool; and the labels already in memory are not persisted again."""
    y = da.from_array(np.arange(6), chunks=3)
    for rows, here in ((6, True), (3, False)):
        X = da.from_array(np.ones((6, 2)), chunks=(rows, 2))
        (ident,) = compute(passes.reduce_rows(_thread, X, combine=np.minimum))
        assert (int(ident[0]) == threading.get_ident()) is here
        np.testing.assert_array_equal(compute(X.sum(axis=1))[0], [2.0] * 6)
    assert passes.keep_on_workers(y, local_bytes=1e6) is y


def test_map_rows_puts_array_arguments_in_the_graph_once():
    X = da.ones((40, 3), chunks=(5, 3))  # 8 blocks
    w = np.random.default_rng(4).normal(size=3)
    out = passes.map_rows(_scale, X, 3, np.float64, w=w)
    (optimised,) = dask.optimize(out)
    assert _copies_in_graph(out, w) == 1 and _copies_in_graph(optimised, w) == 1
    # the same map with w passed as a plain keyword holds a copy per block task
    assert _copies_in_graph(X.map_blocks(_scale, w=w, dtype=np.float64), w) == 8
    np.testing.assert_array_equal(out.compute(), np.ones((40, 3)) * w)


_CALLS = []


def _counted_square(block):
    _CALLS.append(block.shape[0])
    return block * block


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
@pytest.mark.parametrize("store", ["memory", "files"])
def test_row_cache_computes_each_block_once_and_keeps_irregular_chunks(
    scheduler, store, tmp_path, monkeypatch
):
    """The first pass keeps each block as it computes it: one computation per block (a
    separate store would be optimised into a second graph that recomputes it), and
    irregular row chunks are cached as they are; a small array in memory, a larger one
    in files."""
    if store == "files":
        monkeypatch.setattr("scalenc.engine.reduce.MEMORY_CACHE_BYTES", 0)
    X = np.arange(230.0).reshape(115, 2)
    Xd = da.from_array(X, chunks=((40, 7, 60, 8), 2))
    source = Xd.map_blocks(_counted_square, dtype=float)
    _CALLS.clear()
    with dask.config.set(scheduler=scheduler, **{"temporary-directory": str(tmp_path)}):
        with passes.RowCache(source) as cache:
            total = compute(cache.first_pass_input().sum(axis=0))[0]
            np.testing.assert_array_equal(total, (X * X).sum(axis=0))
            assert len(list(tmp_path.iterdir())) == (store == "files")
            cached = cache.cached()
            assert cached.chunks == Xd.chunks
            np.testing.assert_array_equal(compute(cached)[0], X * X)
    assert sorted(_CALLS) == [7, 8, 40, 60]  # each block once, none recomputed for the reads
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "dtype, scatter, where, sqnorm",
    [
        (dtype, scatter, where, sqnorm)
        for dtype in (np.float32, np.float64)
        for scatter in (False, True)
        for where in ("labeled", "unlabeled", "none")
        for sqnorm in (False, True)
    ]
    + [(np.float64, False, "huge", False)],  # a scatter of 1e300 overflows by itself
)
def test_first_pass_counts_nonfinite_values_in_any_row(dtype, scatter, where, sqnorm):
    """The first pass sees non-finite values through the products it computes anyway (no
    separate scan), with or without squared norms; a NaN/inf in an unlabeled row counts
    too, and huge finite float64 values (whose norms overflow) are not miscounted."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(5000, 4)).astype(dtype)
    codes = rng.integers(0, 3, 5000)
    codes[::10] = -1
    if where == "labeled":
        X[1, 2], X[4001, 0] = np.nan, -np.inf
    elif where == "unlabeled":
        X[10, 1], X[4010, 3] = np.inf, np.nan
    elif where == "huge":
        X[7, 0] = 1e300
    Xd, cd = da.from_array(X, chunks=(2500, 4)), da.from_array(codes, chunks=2500)
    (m,) = compute(passes.class_moments_pass(Xd, cd, 3, scatter=scatter, sqnorm=sqnorm))
    assert m["nonfinite"] == (2 if where in ("labeled", "unlabeled") else 0)
    if where in ("none", "huge"):
        U = np.array([X[codes == k].astype(np.float64).mean(0) for k in range(3)])
        if dtype == np.float32 and scatter and not sqnorm:
            # class sums from float32 tile products: exact to float32 rounding of the spread
            assert np.all(np.abs(m["mean"] - U) <= 1e-6 * X.std(axis=0))
        else:
            np.testing.assert_allclose(m["mean"], U, rtol=1e-12)


def _oracle_moments(X, y, classes, unlabeled):
    X = X.astype(np.float64)
    rows = [X[(y == c) & ~unlabeled] for c in classes]
    n = np.array([len(r) for r in rows], dtype=float)
    mean = np.array([r.mean(0) for r in rows])
    scatter = sum((r - r.mean(0)).T @ (r - r.mean(0)) for r in rows)
    return n, mean, scatter


@pytest.mark.parametrize("labels", ["int", "str", "float_nan"])
@pytest.mark.parametrize("chunks", [(300,), (7, 93, 50, 150), (40,) * 7 + (20,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_labeled_moments_pass_equals_class_list_then_moments(labels, chunks, dtype):
    """One pass keyed by each block's own labels gives find_classes' classes and the
    class moments of class_moments_pass, whatever classes each block lacks: a block
    with no labeled row, and a class that first appears in the last block."""
    from scalenc.engine.passes import find_classes
    from scalenc.io.labels import encode_labels

    rng = np.random.default_rng(3)
    X = (rng.normal(size=(300, 4)) * [1, 2, 3, 4] + 10).astype(dtype)
    codes = rng.integers(-1, 3, 300)
    codes[:7] = -1  # the first block of the irregular chunking is all unlabeled
    codes[-5:] = 3  # class 3 only in the last rows
    unlabeled = codes < 0
    if labels == "int":
        y = np.where(unlabeled, -1, codes * 10 + 5)
        classes = np.array([5, 15, 25, 35])
    elif labels == "str":
        names = np.array(["ant", "bee", "cat", "dog"], dtype=object)
        y = np.where(unlabeled, None, names[np.clip(codes, 0, 3)]).astype(object)
        classes = names
    else:
        y = np.where(unlabeled, np.nan, codes + 1.0)
        classes = np.array([1.0, 2.0, 3.0, 4.0])
    Xd = da.from_array(X, chunks=(chunks, 4))
    yd = da.from_array(y, chunks=(chunks,))
    (out,) = compute(passes.labeled_moments_pass(Xd, yd, scatter=True, sqnorm=True))
    np.testing.assert_array_equal(out["classes"], classes)
    np.testing.assert_array_equal(out["classes"], find_classes(yd))
    m = out["moments"]
    n, mean, scatter = _oracle_moments(X, y, classes, unlabeled)
    np.testing.assert_array_equal(m["n"], n)
    np.testing.assert_allclose(m["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(m["scatter"], scatter, rtol=2e-5 if dtype == np.float32 else 1e-10)
    assert m["rows"] == 300 and m["nonfinite"] == 0
    (ref,) = compute(
        passes.class_moments_pass(Xd, encode_labels(yd, classes), 4, scatter=True, sqnorm=True)
    )
    np.testing.assert_allclose(m["sqnorm"], ref["sqnorm"], rtol=1e-12)


def test_a_pass_reads_each_block_in_its_own_task(tmp_path):
    """Each block's reads of X and y and the label encoding are fused into the block's
    task: a pass over a Zarr store is one task per block plus the tree's merges."""
    import zarr

    from scalenc.io.labels import encode_labels

    X = np.arange(400.0).reshape(100, 4)
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("X", data=X, chunks=(25, 4))
    root.create_array("y", data=np.arange(100) % 3, chunks=(25,))
    Xd, yd = da.from_zarr(root["X"]), da.from_zarr(root["y"])
    result = passes.class_moments_pass(Xd, encode_labels(yd, np.arange(3)), 3)
    with TaskLog() as tasks:
        (m,) = compute(result)
    np.testing.assert_array_equal(m["n"], [34, 33, 33])
    # 4 block tasks and 1 merge; unfused, the reads of X and y and the encoding would add
    # 3 tasks per block. The graph holds the two Zarr arrays besides, as data.
    assert tasks.computes == 1 and len(tasks.sizes) == 4 + 1
    assert len(tasks.graphs[0]) == 4 + 1 + 2


def test_a_pass_reads_each_block_of_x_and_y_once():
    """Counted reads: one pass over (X, y) reads every block of each exactly once, and
    runs one task per block plus the merges, so each block's two reads share its task."""
    from scalenc.io.labels import encode_labels

    X = np.arange(400.0).reshape(100, 4)
    Xd, x_reads = counted(X, (10, 40, 25, 25))
    yd, y_reads = counted(np.arange(100) % 3, (10, 40, 25, 25))
    with dask.config.set({"scalenc.split-every": 2}):
        result = passes.class_moments_pass(Xd, encode_labels(yd, np.arange(3)), 3)
    with TaskLog() as tasks:
        (m,) = compute(result)
    np.testing.assert_array_equal(m["n"], [34, 33, 33])
    assert x_reads.per_block() == [1, 1, 1, 1] and y_reads.per_block() == [1, 1, 1, 1]
    assert len(tasks.sizes) == 4 + 3  # 4 block tasks, merges 2 + 1
