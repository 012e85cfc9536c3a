"""What a newcomer tripped over (issue 37), each run as the user ran it: the command or call,
its output and its exit code. The commands run in this process (``run_here``: the command's
code, as a batch job runs it), the signal after the swap through the real executable."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from test_cli import run_here


@pytest.fixture(scope="module")
def table_csv(tmp_path_factory):
    """A 20 000-row CSV with a string column and a column with missing values."""
    rng = np.random.default_rng(0)
    n = 20_000
    frame = pd.DataFrame(
        {"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["x", "y", "z"], n)}
    )
    frame.loc[::7, "b"] = np.nan
    frame["label"] = (frame.a > 0).astype(int)
    folder = tmp_path_factory.mktemp("table")
    path = folder / "table.csv"
    frame.to_csv(path, index=False)
    model = folder / "model"
    code, _, err = run_here(
        "fit", "lrc", "--data", path, "--label-column", "label", "--handle-missing", "impute",
        "--model-out", model,
    )  # fmt: skip
    assert code == 0, err
    return path, model


# the table in row blocks of 3000: CI's slow run (the command again)
@pytest.mark.parametrize("chunk_rows", [None, pytest.param(3000, marks=pytest.mark.slow)])
def test_evaluate_a_csv_table_with_string_and_missing_columns(table_csv, chunk_rows):
    path, model = table_csv
    extra = [] if chunk_rows is None else ["--chunk-rows", chunk_rows]
    code, out, err = run_here(
        "evaluate", "--model", model, "--data", path, "--label-column", "label",
        "--format", "json", *extra,
    )  # fmt: skip
    assert code == 0, err
    assert "Row chunks" not in err
    summary = json.loads(out)
    assert summary["scores"]["labeled_rows"] == 20_000
    assert summary["scores"]["accuracy"] > 0.95


@pytest.mark.slow  # an HTML report of a table (matplotlib); test_report's reports stay in the default run
def test_report_on_a_csv_table_with_string_and_missing_columns(table_csv, tmp_path):
    pytest.importorskip("matplotlib")
    path, model = table_csv
    code, out, err = run_here(
        "report", "--model", model, "--data", path, "--label-column", "label",
        "--out", tmp_path / "report.html", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["scores"]["labeled_rows"] == 20_000
    assert (tmp_path / "report.html").exists()


#: The `scalenc` executable that receives SIGINT once `--overwrite` has swapped the new
#: output in, while the old one (now under the temporary name) is being deleted.
SIGNAL_AFTER_SWAP = """
import os, signal, sys, time
from scalenc.io import atomic
from scalenc.cli import main

original = atomic.remove

def remove(path):
    if not remove.fired and ".tmp-" in os.fspath(path):
        remove.fired = True
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    original(path)

remove.fired = False
atomic.remove = remove
sys.exit(main())
"""


def test_a_signal_after_the_overwrite_swap_says_the_new_output_is_there(tmp_path):
    from conftest import make_blobs
    from test_cli_output import _default_sigint, _env

    from scalenc import load_model

    X, y = make_blobs(n=400, p=4, K=2, seed=0)
    data = tmp_path / "d.npz"
    np.savez(data, X=X, y=y)
    model = tmp_path / "model"
    fit = ["fit", "lrc", "--data", data, "--model-out", model, "--overwrite"]
    code, _, err = run_here(*fit, "--set", "alpha=1.0")
    assert code == 0, err
    proc = subprocess.run(
        [sys.executable, "-c", SIGNAL_AFTER_SWAP, *map(str, fit), "--set", "alpha=2.0"],
        capture_output=True, text=True, timeout=300, env=_env(), preexec_fn=_default_sigint,
    )  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "discarded" not in proc.stderr and "left as it" not in proc.stderr, proc.stderr
    assert re.search(
        rf"scalenc error \(exit 130\): scalenc fit was interrupted by SIGINT \(Ctrl-C\) after it "
        rf"had written {re.escape(str(model))} complete \(that path holds the new result\)\.",
        proc.stderr,
    ), proc.stderr
    assert load_model(model).alpha == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "model"]


@pytest.fixture(scope="module")
def two_batches(tmp_path_factory):
    from conftest import make_blobs

    X, y = make_blobs(n=600, p=5, K=3, seed=3)
    folder = tmp_path_factory.mktemp("batches")
    np.savez(folder / "day1.npz", X=X[:300], y=y[:300])
    np.savez(folder / "day2.npz", X=X[300:], y=y[300:])
    return folder


@pytest.mark.parametrize("method", ["encoder", "ccdr-classifier"])
@pytest.mark.slow  # four commands per method; test_partial_fit's command update of an encoder counts its update in the default run
def test_an_update_summary_counts_the_updates(two_batches, tmp_path, method):
    folder = two_batches
    code, _, err = run_here(
        "fit", method, "--data", folder / "day1.npz", "--model-out", tmp_path / "m1"
    )
    assert code == 0, err
    update = ["fit", method, "--data", folder / "day2.npz", "--update", tmp_path / "m1"]
    code, out, err = run_here(*update, "--model-out", tmp_path / "m2")
    assert code == 0, err
    assert re.search(rf"^updated {method} \(\w+\) model .*m1 with .*\(update 1 since its fit\)$",
                     out, re.MULTILINE), out  # fmt: skip
    assert "None" not in out and "?" not in out, out
    code, out, err = run_here(*update, "--model-out", tmp_path / "m3", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["update"]["updates"] == 1


def test_the_ccdr_classifier_summary_shows_its_heat_kernel_scale(two_batches, tmp_path):
    code, out, err = run_here(
        "fit", "ccdr-classifier", "--data", two_batches / "day1.npz", "--model-out",
        tmp_path / "m",
    )  # fmt: skip
    assert code == 0, err
    assert re.search(r"embedding: \d+ components, ε = \d[\d.e+-]*, eigenvalues ", out), out
    assert "ε = ?" not in out


def test_an_unknown_option_after_the_command_gets_the_command_usage(table_csv, tmp_path):
    path, model = table_csv
    code, out, err = run_here(
        "fit", "lrc", "--data", path, "--label-column", "label", "--model-out", tmp_path / "m",
        "--bogus",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert err.startswith("usage: scalenc fit ")
    assert err.endswith("scalenc fit: error: unrecognized arguments: --bogus\n"), err
    code, _, err = run_here(
        "predict", "--model", model, "--data", path, "--out", tmp_path / "p.zarr", "--proab"
    )
    assert code == 2
    assert err.startswith("usage: scalenc predict ")
    assert "scalenc predict: error: unrecognized arguments: --proab (did you mean --proba?)" in err


def test_a_misspelt_parameter_gets_the_nearest_name(table_csv, tmp_path):
    path, _ = table_csv
    code, _, err = run_here(
        "fit", "lrc", "--data", path, "--label-column", "label", "--model-out", tmp_path / "m",
        "--set", "alpah=1",
    )  # fmt: skip
    assert code == 2
    assert "LRClassifier has no parameter 'alpah'. Did you mean 'alpha'? Its parameters: [" in err
    assert "scalenc data " not in err  # refused before the data is read


def test_a_bad_parameter_value_is_refused_before_the_data_is_read(table_csv, tmp_path):
    path, _ = table_csv
    code, _, err = run_here(
        "fit", "lrc", "--data", path, "--label-column", "label", "--model-out", tmp_path / "m",
        "--set", "alpha=-1",
    )  # fmt: skip
    assert code == 2
    assert "The 'alpha' parameter of LRClassifier must be a float in the range [0.0, inf)" in err
    assert "scalenc data " not in err and "scalenc fit lrc" not in err, err


def test_a_table_is_logged_by_its_column_kinds_not_as_object(table_csv):
    path, model = table_csv
    code, out, err = run_here(
        "evaluate", "--model", model, "--data", path, "--label-column", "label",
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    kinds = "table of 1 categorical, 2 numeric columns (encoded by the estimator)"
    assert f"20000 rows x 3 features, {kinds}, 2 row blocks" in err
    assert "object" not in err
    assert json.loads(out)["data"]["dtype"] == kinds


def test_a_string_in_a_numeric_column_is_named(table_csv, tmp_path):
    path, model = table_csv
    frame = pd.read_csv(path).iloc[:3000].astype({"a": object})
    frame.loc[7, "a"] = "abc"
    bad = tmp_path / "bad.csv"
    frame.to_csv(bad, index=False)
    code, _, err = run_here("evaluate", "--model", model, "--data", bad, "--label-column", "label")
    assert code == 2
    assert "could not convert" not in err
    assert (
        "Feature column 'a' holds 'abc' (1 such value(s)), not a number; the model was fitted "
        "on it as a numeric column. Correct or remove those values"
    ) in err, err


# --- NumPy to Zarr: write_dataset and `scalenc convert` -------------------------------------


def test_write_dataset_takes_numpy_arrays(tmp_path):
    from scalenc import load, write_dataset

    X = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np.array(["a", "b"] * 10, dtype=object)
    path = write_dataset(X, y, tmp_path / "train.zarr")
    X2, y2 = load(path)
    np.testing.assert_array_equal(X2.compute(), X)
    assert X2.dtype == np.float32 and y2.compute().tolist() == y.tolist()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same 2 000 × 3 rows and labels as .npz, .npy (no labels), CSV and Parquet."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(2000, 3))
    y = rng.integers(0, 3, 2000)
    folder = tmp_path_factory.mktemp("sources")
    np.savez(folder / "d.npz", X=X, y=y)
    np.save(folder / "d.npy", X)
    frame = pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1], "f2": X[:, 2], "label": y})
    frame.to_csv(folder / "d.csv", index=False)
    frame.to_parquet(folder / "d.parquet", row_group_size=700)
    return folder, X, y


@pytest.mark.parametrize("name", ["d.npz", "d.npy", "d.csv", "d.parquet"])
def test_convert_writes_a_zarr_store_that_load_reads(sources, tmp_path, name):
    from scalenc import load

    folder, X, y = sources
    labels = ["--label-column", "label"] if name.endswith((".csv", ".parquet")) else []
    out = tmp_path / "d.zarr"
    code, text, err = run_here(
        "convert", "--data", folder / name, *labels, "--out", out, "--chunk-rows", 500
    )
    assert code == 0, err
    assert re.match(
        rf"convert .*{re.escape(name)} \(2000 rows × 3 features, 4 row blocks\) to ", text
    )
    X2, y2 = load(out)
    assert X2.chunks[0] == (500, 500, 500, 500)
    np.testing.assert_array_equal(X2.compute(), X)
    if name == "d.npy":
        assert y2 is None
    else:
        np.testing.assert_array_equal(y2.compute(), y)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr"]  # no temporary left


def test_convert_replaces_an_output_only_with_overwrite(sources, tmp_path):
    from scalenc import load

    folder, X, _ = sources
    out = tmp_path / "d.zarr"
    assert run_here("convert", "--data", folder / "d.npy", "--out", out)[0] == 0
    code, _, err = run_here("convert", "--data", folder / "d.npz", "--out", out)
    assert code == 2 and f"{out} exists; pass --overwrite to replace it." in err
    assert load(out)[1] is None  # left as it was
    code, _, err = run_here("convert", "--data", folder / "d.npz", "--out", out, "--overwrite")
    assert code == 0, err
    assert load(out)[1] is not None


def test_convert_refuses_a_table_with_text_columns_naming_the_fix(table_csv, tmp_path):
    path, _ = table_csv
    code, _, err = run_here(
        "convert", "--data", path, "--label-column", "label", "--out", tmp_path / "t.zarr"
    )
    assert code == 2
    assert "has columns that are not numbers (1 categorical, 2 numeric)" in err
    assert "--feature-columns" in err and not (tmp_path / "t.zarr").exists()
    code, _, err = run_here(
        "convert", "--data", path, "--label-column", "label", "--feature-columns", "a",
        "--out", tmp_path / "t.zarr",
    )  # fmt: skip
    assert code == 0, err


# --- progress numbering -----------------------------------------------------------------------


def test_a_csv_fit_numbers_its_passes_as_the_summary_counts_them(tmp_path):
    rng = np.random.default_rng(5)
    n = 3000
    frame = pd.DataFrame(
        {"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["x", "y"], n)}
    )
    frame["label"] = (frame.a + (frame.c == "x") > 0.5).astype(int)
    frame.to_csv(tmp_path / "t.csv", index=False)
    code, out, err = run_here(
        "fit", "nrbfn", "--data", tmp_path / "t.csv", "--label-column", "label",
        "--model-out", tmp_path / "m", "--progress", "lines", "--progress-interval", "0",
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    passes = json.loads(out)["passes"]
    numbers = [int(n) for n in re.findall(r"scalenc fit: pass (\d+) .*started$", err, re.M)]
    assert numbers == list(range(1, passes + 1)), err
    assert "fit: done in " in err and f", {passes} passes over the data" in err
    assert "other" not in err  # computations outside the passes are named by where they fall
    assert "before the first pass" in err
