"""Damaged Zarr stores are refused before they are trained on, naming the store, the array
and the chunk (issue 17): a missing chunk (read by Zarr as the fill value), a garbage or
truncated chunk, unreadable metadata; through the library and the command (exit 2)."""

import json
import shutil

import dask.array as da
import numpy as np
import pytest
from test_cli import run_here

from scalenc import EncoderClassifier, load
from scalenc.io.integrity import DamagedDataError, MissingChunksWarning
from scalenc.io.outputs import write_dataset


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 5)).astype(np.float32)
    y = rng.integers(0, 2, 2000)
    path = tmp_path_factory.mktemp("stores") / "good.zarr"
    write_dataset(da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500), path)
    return path, X, y


def _damaged(good, tmp_path, array="X", how="missing", which=-1):
    path = tmp_path / f"{how}.zarr"
    shutil.copytree(good, path)
    chunks = sorted(p for p in (path / array).rglob("*") if p.is_file() and p.name != "zarr.json")
    target = chunks[which]
    if how == "missing":
        target.unlink()
    elif how == "garbage":
        target.write_bytes(b"not a zstd frame" * 40)
    elif how == "truncated":
        target.write_bytes(target.read_bytes()[:20])
    elif how == "metadata":
        (path / array / "zarr.json").write_text("{not json")
    return path


def test_a_good_store_loads_and_fits_as_the_numpy_data(good_store):
    path, X, y = good_store
    Xd, yd = load(path)
    np.testing.assert_array_equal(Xd.compute(), X)
    np.testing.assert_array_equal(
        EncoderClassifier().fit(Xd, yd).predict(X), EncoderClassifier().fit(X, y).predict(X)
    )


@pytest.mark.parametrize("array", ["X", "y"])
def test_a_missing_chunk_is_refused_at_load_naming_it(good_store, tmp_path, array):
    path = _damaged(good_store[0], tmp_path, array=array, how="missing")
    with pytest.raises(
        DamagedDataError,
        match=rf"missing\.zarr' array '{array}' is missing 1 of its 4 chunks: 'c/3.*' "
        r"\(rows 1500–1999\).*allow_missing_chunks=True",
    ):
        load(path)


def test_missing_chunks_declared_intentional_are_read_as_fill_with_a_warning(good_store, tmp_path):
    path = _damaged(good_store[0], tmp_path, how="missing", which=0)
    with pytest.warns(MissingChunksWarning, match="missing 1 of its 4 chunks: 'c/0/0'"):
        Xd, _ = load(path, allow_missing_chunks=True)
    X = Xd.compute()
    assert (X[:500] == 0).all() and np.array_equal(X[500:], good_store[1][500:])


@pytest.mark.parametrize("how", ["garbage", "truncated"])
def test_an_undecodable_chunk_names_the_store_and_rows(good_store, tmp_path, how):
    Xd, yd = load(_damaged(good_store[0], tmp_path, how=how))
    with pytest.raises(
        DamagedDataError,
        match=rf"Cannot read rows 1500–1999 \(chunk 'c/3/0'\) of '.*{how}\.zarr' array 'X': "
        r"RuntimeError.*damaged",
    ):
        EncoderClassifier().fit(Xd, yd)


def test_unreadable_metadata_is_a_damaged_store(good_store, tmp_path):
    path = _damaged(good_store[0], tmp_path, how="metadata")
    with pytest.raises(DamagedDataError, match=r"Cannot read the metadata .*JSONDecodeError"):
        load(path)


@pytest.mark.parametrize("how", ["missing", "garbage"])
def test_the_command_exits_2_and_writes_nothing(good_store, tmp_path, how):
    path = _damaged(good_store[0], tmp_path, how=how)
    model, summary = tmp_path / "model", tmp_path / "fit.json"
    code, _, err = run_here(
        "fit", "encoder", "--data", path, "--model-out", model, "--json", summary, "--quiet"
    )
    assert code == 2, err
    doc = json.loads(summary.read_text())
    assert doc["status"] == "error" and f"{how}.zarr" in doc["error"]["message"]
    assert not model.exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
