"""Users' data as it arrives (issue 11): Dask-written Parquet with its index, column
selection, and every input format through fsspec URLs (``file://``, ``memory://``)."""

import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import pytest
import zarr

from scalenc import EncoderClassifier, load

# dask's Parquet writer still passes pandas' deprecated inplace= (not scalenc's doing)
pytestmark = pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.set_index")


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, 3000)
    X = rng.normal(size=(3000, 5)) + y[:, None]
    frame = pd.DataFrame(X, columns=[f"px_{i}" for i in range(5)]).assign(y=y)
    return frame, X, y


def _model_predictions(X, y, X_test):
    return EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y).predict(X_test)


@pytest.mark.parametrize("write_index", [True, False])
def test_dask_written_parquet_with_its_index_gives_the_numpy_model(tmp_path, table, write_index):
    frame, X, y = table
    path = tmp_path / "t.parquet"
    dd.from_pandas(frame, npartitions=4).to_parquet(path, write_index=write_index)
    Xd, yd = load(path, label_column="y")
    assert Xd.shape == (3000, 5)  # no __null_dask_index__ among the features
    assert Xd.numblocks[0] == 4  # a block per row group, lengths from the footers
    features = frame.drop(columns="y")  # the file's column names: predicted by name
    np.testing.assert_array_equal(_model_predictions(Xd, yd, features), _model_predictions(X, y, X))


def test_a_stored_pandas_index_is_not_a_feature(tmp_path, table):
    frame, X, _ = table
    path = tmp_path / "p.parquet"
    frame.set_index(pd.Index(np.arange(3000) * 2, name=None)).to_parquet(path)
    Xd, _ = load(path, label_column="y")
    np.testing.assert_array_equal(Xd.compute(), X)


def test_feature_columns_by_name_or_pattern(tmp_path, table):
    frame, X, _ = table
    path = tmp_path / "f.parquet"
    frame.assign(note=1.0).to_parquet(path)
    Xd, _ = load(path, label_column="y", feature_columns=["px_3", "px_0"])
    np.testing.assert_array_equal(Xd.compute(), X[:, [3, 0]])
    Xd, _ = load(path, label_column="y", feature_columns="px_*")
    np.testing.assert_array_equal(Xd.compute(), X)
    with pytest.raises(ValueError, match=r"no column\(s\) \['px_9'\]"):
        load(path, feature_columns=["px_9"])
    with pytest.raises(ValueError, match="no column matches feature_columns='q_\\*'"):
        load(path, feature_columns="q_*")
    with pytest.raises(ValueError, match="has no column 'label'"):
        load(path, label_column="label")


@pytest.fixture
def memory_fs():
    fs = fsspec.filesystem("memory")
    yield fs
    fs.rm("/scalenc-test", recursive=True) if fs.exists("/scalenc-test") else None


def test_every_input_format_from_a_memory_url(memory_fs, table, tmp_path):
    frame, X, y = table
    with memory_fs.open("/scalenc-test/x.npy", "wb") as fh:
        np.save(fh, X)
    with memory_fs.open("/scalenc-test/d.npz", "wb") as fh:
        np.savez(fh, X=X, y=y)
    with memory_fs.open("/scalenc-test/d.csv", "w") as fh:
        frame.to_csv(fh, index=False)
    with memory_fs.open("/scalenc-test/t.parquet", "wb") as fh:
        frame.to_parquet(fh, row_group_size=1000)
    group = zarr.open_group("memory://scalenc-test/d.zarr", mode="w")
    group.create_array("X", data=X, chunks=(700, 5))
    group.create_array("y", data=y, chunks=(700,))

    Xn, _ = load("memory://scalenc-test/x.npy", chunk_rows=800)
    assert Xn.numblocks[0] == 4  # read in row blocks by the workers, not on the client
    np.testing.assert_array_equal(Xn.compute(), X)
    for url, kwargs in [
        ("memory://scalenc-test/d.npz", {}),
        ("memory://scalenc-test/d.csv", {"label_column": "y"}),
        ("memory://scalenc-test/t.parquet", {"label_column": "y"}),
        ("memory://scalenc-test/d.zarr", {}),
    ]:
        Xd, yd = load(url, **kwargs)
        np.testing.assert_allclose(Xd.compute(), X, err_msg=url)
        np.testing.assert_array_equal(yd.compute(), y, err_msg=url)
    Xp, _ = load("memory://scalenc-test/t.parquet", label_column="y")
    assert Xp.numblocks[0] == 3  # row groups of 1000 rows


def test_file_urls_and_parquet_directories(tmp_path, table):
    frame, X, y = table
    dd.from_pandas(frame, npartitions=3).to_parquet(tmp_path / "dir")
    Xd, yd = load(f"file://{tmp_path}/dir", label_column="y")
    np.testing.assert_array_equal(Xd.compute(), X)
    np.testing.assert_array_equal(yd.compute(), y)
    assert not any(p.name.startswith("file:") for p in tmp_path.iterdir())


def test_bad_urls_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="Protocol not known: nosuch"):
        load("nosuch://bucket/x.zarr")
    with pytest.raises(FileNotFoundError, match="'memory://scalenc-none/x.npy' does not exist"):
        load("memory://scalenc-none/x.npy")


def test_command_selects_columns_and_never_writes_storage_options(tmp_path, table):
    import json

    from test_cli import run_here

    frame, _, _ = table
    dd.from_pandas(frame.assign(other=1.0), npartitions=2).to_parquet(tmp_path / "t.parquet")
    summary = tmp_path / "fit.json"
    fit = ["fit", "encoder", "--data", f"file://{tmp_path}/t.parquet", "--label-column", "y"]
    code, _, err = run_here(
        *fit, "--feature-columns", "px_*", "--storage-option", "secret_token=hunter2",
        "--storage-option=auto_mkdir=true", "--model-out", tmp_path / "m", "--json", summary,
    )  # fmt: skip
    assert code == 0, err
    text = summary.read_text()
    assert "hunter2" not in text and "hunter2" not in err
    assert json.loads(text)["argv"][-6:-4] == [
        "secret_token=***",
        "--storage-option=auto_mkdir=***",
    ]
    code, _, err = run_here(
        *fit, "--feature-columns", "px_0,px_1", "--model-out", tmp_path / "m2", "--json", summary
    )
    assert code == 0, err
    assert json.loads(summary.read_text())["data"]["features"] == 2
