"""Inputs (NumPy, Dask, Zarr, Parquet, npy, npz, CSV) and atomic outputs."""

import os

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import zarr

from scalenc import EncoderClassifier
from scalenc.engine.passes import find_classes
from scalenc.io.inputs import as_dask_array, check_xy, load
from scalenc.io.labels import encode_labels
from scalenc.io.outputs import write_output
from scalenc.io.tables import Table
from scalenc.math.labels import unlabeled_mask
from scalenc.nrbfn import LRClassifier


@pytest.fixture
def xy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(250, 4)).astype(np.float32)
    y = rng.integers(0, 3, 250)
    return X, y


def test_numpy_is_chunked_by_rows_without_copy(xy):
    X, _ = xy
    Xd = as_dask_array(X, chunk_rows=60)
    assert Xd.chunks == ((60, 60, 60, 60, 10), (4,))
    assert Xd.dtype == np.float32
    assert as_dask_array(X.astype(int)).dtype == np.float64


def test_default_numpy_blocks_give_every_core_a_block(monkeypatch):
    """About 64 MB a block, but never one block for the whole array when it has rows
    enough for one per core (8192 rows a block at least): every pass uses every core."""
    from scalenc.io import inputs as data

    monkeypatch.setattr(data, "CPU_COUNT", 2)
    X = np.zeros((50_000, 42))  # 17 MB: one block by bytes alone
    assert as_dask_array(X).chunks[0] == (25_000, 25_000)
    assert as_dask_array(X[:150]).chunks[0] == (150,)  # small data stays one block
    assert as_dask_array(X[:10_000]).chunks[0] == (8192, 1808)
    wide = np.lib.stride_tricks.as_strided(np.zeros(1), (10_000, 4096), (0, 0))  # 328 MB
    assert max(as_dask_array(wide).chunks[0]) == 64 * 2**20 // (4096 * 8)  # bytes bound
    monkeypatch.setattr(data, "CPU_COUNT", 8)
    assert len(as_dask_array(X).chunks[0]) == 7  # 50 000 / 8192: the row floor


def test_default_numpy_blocks_are_equal_and_a_multiple_of_the_cores(monkeypatch):
    """MNIST in float32 is three blocks by bytes: on two cores every pass would end with
    one core idle for a third of it. Four equal blocks instead (and six for float64)."""
    from scalenc.io import inputs as data

    monkeypatch.setattr(data, "CPU_COUNT", 2)
    mnist32 = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (60_000, 784), (0, 0))
    assert as_dask_array(mnist32).chunks[0] == (15_000,) * 4
    mnist64 = np.lib.stride_tricks.as_strided(np.zeros(1), (60_000, 784), (0, 0))
    assert as_dask_array(mnist64).chunks[0] == (10_000,) * 6
    for n_rows, p in [(60_000, 784), (1_000_000, 256), (123_457, 50)]:
        X = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (n_rows, p), (0, 0))
        chunks = as_dask_array(X).chunks[0]
        assert len(chunks) % 2 == 0 and max(chunks) - min(chunks) <= 1, chunks
        assert max(chunks) * p * 4 <= 64 * 2**20  # never above the bytes bound


def test_column_chunks_are_merged_and_row_chunks_kept(xy):
    X, _ = xy
    Xd = as_dask_array(da.from_array(X, chunks=(50, 2)))
    assert Xd.chunks == ((50,) * 5, (4,))


def test_labels_are_aligned_to_X_chunks(xy):
    X, y = xy
    Xd, yd = check_xy(da.from_array(X, chunks=(70, 4)), da.from_array(y, chunks=33))
    assert yd.chunks[0] == Xd.chunks[0]
    np.testing.assert_array_equal(yd.compute(), y)


@pytest.mark.parametrize(
    "values,expected",
    [
        (np.array([0, -1, 2]), [False, True, False]),
        (np.array([0.0, np.nan, -1.0, 2.5]), [False, True, True, False]),
        (
            np.array(["a", None, -1, float("nan"), "b"], dtype=object),
            [False, True, True, True, False],
        ),
        (np.array(["a", "b"]), [False, False]),
    ],
)
def test_unlabeled_mask(values, expected):
    np.testing.assert_array_equal(unlabeled_mask(values), expected)


def test_find_classes_and_encode_across_blocks():
    y = np.array(["b", None, "a", "c", "a", None, "b"], dtype=object)
    yd = da.from_array(y, chunks=2)
    classes = find_classes(yd)
    assert classes.tolist() == ["a", "b", "c"]
    np.testing.assert_array_equal(encode_labels(yd, classes).compute(), [1, -1, 0, 2, 0, -1, 1])


def _fit_predict(X, y):
    model = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    return (
        model.predict(np.asarray(X)) if not isinstance(X, da.Array) else model.predict(X).compute()
    )


def test_zarr_group_and_arrays(tmp_path, xy):
    X, y = xy
    group = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    group.create_array("X", data=X, chunks=(64, 4))
    group.create_array("y", data=y, chunks=(100,))
    group.create_array("labels2", data=(y + 1) % 3, chunks=(100,))
    Xd, yd = load(tmp_path / "d.zarr")
    assert Xd.chunks[0] == (64, 64, 64, 58) and yd.chunks[0] == Xd.chunks[0]
    np.testing.assert_array_equal(Xd.compute(), X)
    np.testing.assert_array_equal(yd.compute(), y)
    _, y2 = load(tmp_path / "d.zarr", labels="labels2")
    np.testing.assert_array_equal(y2.compute(), (y + 1) % 3)
    # a bare array plus labels from another store
    zarr.save_array(str(tmp_path / "y.zarr"), y)
    Xa, ya = load(f"{tmp_path}/d.zarr/X", labels=str(tmp_path / "y.zarr"))
    np.testing.assert_array_equal(_fit_predict(Xa, ya), _fit_predict(X, y))


def test_zarr_group_without_X_is_explained(tmp_path):
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w").create_array(
        "features", data=np.ones((3, 2))
    )
    with pytest.raises(
        ValueError,
        match=r"holds arrays \['features'\]; scalenc reads features from an array named 'X'",
    ):
        load(tmp_path / "g.zarr")


def test_parquet_dataset_row_groups(tmp_path, xy):
    X, y = xy
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(4)])
    frame["label"] = np.array(["u", "v", "w"])[y]
    os.makedirs(tmp_path / "pq")
    frame.iloc[:100].to_parquet(tmp_path / "pq" / "part-0.parquet", row_group_size=40)
    frame.iloc[100:].to_parquet(tmp_path / "pq" / "part-1.parquet", row_group_size=90)
    Xd, yd = load(tmp_path / "pq", label_column="label")
    assert Xd.chunks[0] == (40, 40, 20, 90, 60)
    np.testing.assert_array_equal(Xd.compute(), X)
    np.testing.assert_array_equal(yd.compute(), frame["label"].to_numpy())
    with pytest.raises(ValueError, match=r"has no column 'target'"):
        load(tmp_path / "pq", label_column="target")


def test_npy_npz_csv(tmp_path, xy):
    X, y = xy
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    Xd, yd = load(tmp_path / "X.npy", labels=str(tmp_path / "y.npy"))
    np.testing.assert_array_equal(Xd.compute(), X)
    np.testing.assert_array_equal(yd.compute(), y)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    Xz, yz = load(tmp_path / "d.npz")
    np.testing.assert_array_equal(yz.compute(), y)
    frame = pd.DataFrame(X.astype(np.float64), columns=list("abcd"))
    frame["cls"] = y
    frame.to_csv(tmp_path / "d.csv", index=False)
    Xc, yc = load(tmp_path / "d.csv", label_column="cls")
    np.testing.assert_allclose(Xc.compute(), X, rtol=1e-6)
    np.testing.assert_array_equal(_fit_predict(Xc, yc), _fit_predict(Xd, yd))


@pytest.mark.parametrize("suffix", [".zarr", ".parquet"])
def test_write_output_is_atomic_and_refuses_to_overwrite(tmp_path, suffix, xy):
    X, y = xy
    model = EncoderClassifier().fit(X, y)
    Xd = da.from_array(X, chunks=(60, 4))
    out = tmp_path / f"proba{suffix}"
    write_output(model.predict_proba(Xd), out)
    if suffix == ".zarr":
        got = zarr.open_array(str(out), mode="r")[:]
    else:
        got = pd.read_parquet(out).to_numpy()
    np.testing.assert_allclose(got, model.predict_proba(X))
    with pytest.raises(FileExistsError, match="exists; pass overwrite=True"):
        write_output(model.predict_proba(Xd), out)
    write_output(model.predict_proba(Xd), out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def _explode(block):
    if block[0, 0] > -np.inf and block.shape[0] < 60:  # the last, short block fails
        raise RuntimeError("disk full")
    return block


@pytest.mark.parametrize("suffix", [".zarr", ".parquet"])
def test_failed_write_leaves_nothing(tmp_path, suffix, xy):
    X, _ = xy
    arr = da.from_array(X, chunks=(60, 4)).map_blocks(_explode, dtype=X.dtype)
    with pytest.raises(RuntimeError, match="disk full"):
        write_output(arr, tmp_path / f"out{suffix}")
    assert list(tmp_path.iterdir()) == []


def test_output_format_must_be_known(tmp_path, xy):
    with pytest.raises(ValueError, match=r"Cannot tell the output format .*\*.zarr or \*.parquet"):
        write_output(da.ones((4, 2), chunks=2), tmp_path / "out.bin")


def test_missing_path_is_explained(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=rf"nope\.zarr' does not exist; the nearest part that exists is '{tmp_path}'",
    ):
        load(tmp_path / "nope.zarr")


@pytest.mark.parametrize("suffix", [".zarr", ".parquet"])
def test_write_dataset_round_trips_through_load(tmp_path, suffix, xy):
    from scalenc.io.outputs import write_dataset

    X, y = xy
    labels = np.array(["ant", "bee", "cat"], dtype=object)[y]
    path = write_dataset(
        da.from_array(X, chunks=(64, 4)),
        da.from_array(labels, chunks=50),
        tmp_path / f"d{suffix}",
        attrs={"source": "test"},
    )
    Xd, yd = load(path, label_column="y" if suffix == ".parquet" else None)
    np.testing.assert_array_equal(Xd.compute(), X)
    np.testing.assert_array_equal(np.asarray(yd.compute(), dtype=object), labels)
    with pytest.raises(FileExistsError, match="exists"):
        write_dataset(da.from_array(X, chunks=64), None, path)


def test_a_write_removes_temporaries_that_killed_runs_left(tmp_path):
    """A killed writer cannot remove its ``<path>.tmp-<host>-<pid>-…``; the next write to the
    same path does, but not those of a live process or of another host."""
    import subprocess
    import sys

    from scalenc.io import tempnames as _tempnames
    from scalenc.io.outputs import write_output

    target = tmp_path / "out.zarr"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    host = _tempnames._host()
    abandoned = tmp_path / f"out.zarr.tmp-{host}-{dead}-0123abcd"
    live = tmp_path / f"out.zarr.tmp-{host}-{os.getppid()}-0123abcd"
    remote = tmp_path / f"out.zarr.tmp-otherhost-{dead}-0123abcd"
    for d in (abandoned, live, remote):
        (d / "X").mkdir(parents=True)
    write_output(da.ones((10, 2), chunks=5), target)
    assert not abandoned.exists()
    assert live.exists() and remote.exists()
    assert target.exists()
    assert _tempnames.temporary_sibling(target).startswith(f"{target}.tmp-{host}-{os.getpid()}-")


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_non_numeric_feature_columns_come_as_a_table(tmp_path, suffix):
    frame = pd.DataFrame({"a": np.arange(5.0), "city": list("vwxyz"), "y": [0, 1, 0, 1, 0]})
    path = tmp_path / f"t.{suffix}"
    frame.to_csv(path, index=False) if suffix == "csv" else frame.to_parquet(path)
    X, y = load(path, label_column="y")
    assert isinstance(X, Table) and X.shape == (5, 2) and list(X.columns) == ["a", "city"]
    with pytest.raises(ValueError, match=r"feature column\(s\) \['city'\] are not numeric"):
        LRClassifier(categorical="error").fit(X, y)
    X, y = load(path, label_column="city")  # the text column as labels is fine
    assert X.shape == (5, 2) and y.compute().tolist() == list("vwxyz")


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_label_like_column_read_as_a_feature_is_said(tmp_path, suffix):
    frame = pd.DataFrame({"a": np.arange(4.0), "label": [0, 1, 0, 1]})
    path = tmp_path / f"t.{suffix}"
    frame.to_csv(path, index=False) if suffix == "csv" else frame.to_parquet(path)
    with pytest.warns(UserWarning, match="column 'label' is read as a feature.*label_column"):
        X, y = load(path)
    assert X.shape == (4, 2) and y is None
