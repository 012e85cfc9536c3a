"""Feature names of every table input (Parquet, CSV, DataFrames), checked by name at predict,
evaluate, ``fit --update`` and through a model file: columns in another order are taken by
name, a table that lacks one is refused naming it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from scalenc import LRClassifier, cli, load, load_model, save_model
from scalenc.exceptions import InputError

COLUMNS = ["a", "b", "c", "d"]
REVERSED = ["d", "c", "b", "a"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """The same 400 rows as Parquet and CSV, with columns a–d and in the order d–a, and a
    table without column b; y depends on a and b only."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(400, 4)), columns=COLUMNS)
    frame["y"] = (frame.a + 0.5 * frame.b > 0).astype(int)
    folder = tmp_path_factory.mktemp("names")
    paths = {}
    for suffix in ("parquet", "csv"):
        for name, columns in (("same", COLUMNS), ("reversed", REVERSED), ("no_b", ["a", "c", "d"])):
            path = folder / f"{name}.{suffix}"
            part = frame[[*columns, "y"]]
            part.to_parquet(path) if suffix == "parquet" else part.to_csv(path, index=False)
            paths[name, suffix] = path
    return frame, paths


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_a_table_file_with_its_columns_reordered_is_read_by_name(tables, suffix):
    frame, paths = tables
    X, y = load(paths["same", suffix], label_column="y")
    model = LRClassifier().fit(X, y)
    assert model.feature_names_in_.tolist() == COLUMNS
    Xr, yr = load(paths["reversed", suffix], label_column="y")
    expected = model.predict(frame[COLUMNS])
    np.testing.assert_array_equal(model.predict(Xr).compute(), expected)
    assert model.score(Xr, yr) == model.score(X, y) > 0.9


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_a_table_file_that_lacks_a_column_is_refused_naming_it(tables, suffix):
    _, paths = tables
    model = LRClassifier().fit(*load(paths["same", suffix], label_column="y"))
    X, y = load(paths["no_b", suffix], label_column="y")
    with pytest.raises(InputError, match=r"X has no column\(s\) \['b'\], which LRClassifier"):
        model.predict(X)
    with pytest.raises(InputError, match=r"X has no column\(s\) \['b'\]"):
        model.score(X, y)


def test_a_dataframe_with_its_columns_reordered_is_read_by_name(tables):
    frame, _ = tables
    model = LRClassifier().fit(frame[COLUMNS], frame.y)
    np.testing.assert_array_equal(model.predict(frame[REVERSED]), model.predict(frame[COLUMNS]))
    with pytest.raises(InputError, match=r"X has no column\(s\) \['b'\]"):
        model.predict(frame[["a", "c", "d"]])


def test_partial_fit_and_a_model_file_take_the_columns_by_name(tables, tmp_path):
    frame, paths = tables
    half = frame.iloc[:200]
    model = LRClassifier().fit(half[COLUMNS], half.y)
    Xr, yr = load(paths["reversed", "parquet"], label_column="y")
    save_model(model, tmp_path / "model")
    loaded = load_model(tmp_path / "model")
    assert loaded.feature_names_in_.tolist() == COLUMNS
    np.testing.assert_array_equal(loaded.predict(Xr).compute(), model.predict(frame[COLUMNS]))
    model.partial_fit(Xr, yr)
    oracle = LRClassifier().fit(
        pd.concat([half, frame])[COLUMNS], pd.concat([half, frame]).y
    )  # fmt: skip
    np.testing.assert_allclose(model.coef_, oracle.coef_, rtol=1e-8)


def _cli(capsys, *argv):
    code = cli.main([str(a) for a in argv] + ["--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_evaluate_and_update_on_a_reordered_table_file(tables, tmp_path, capsys, suffix):
    _, paths = tables
    model = tmp_path / "model"
    code, _, err = _cli(
        capsys, "fit", "lrc", "--data", paths["same", suffix], "--label-column", "y",
        "--model-out", model,
    )  # fmt: skip
    assert code == 0, err
    accuracy = {}
    for name in ("same", "reversed"):
        code, summary, err = _cli(
            capsys, "evaluate", "--model", model, "--data", paths[name, suffix],
            "--label-column", "y",
        )  # fmt: skip
        assert code == 0, err
        accuracy[name] = summary["scores"]["accuracy"]
    assert accuracy["reversed"] == accuracy["same"] > 0.9
    code, _, err = _cli(
        capsys, "fit", "lrc", "--update", model, "--data", paths["reversed", suffix],
        "--label-column", "y", "--model-out", tmp_path / "updated",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = _cli(
        capsys, "evaluate", "--model", model, "--data", paths["no_b", suffix],
        "--label-column", "y",
    )  # fmt: skip
    assert code == 2
    assert "X has no column(s) ['b'], which LRClassifier was fitted on" in err
