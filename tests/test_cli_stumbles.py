"""What a newcomer tripped over (issue 37), each run as the user ran it: the command or call,
its output and its exit code."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_cli_output import run_exe_text


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
    code, _, err = run_exe_text(
        "fit", "lrc", "--data", path, "--label-column", "label", "--handle-missing", "impute",
        "--model-out", model,
    )  # fmt: skip
    assert code == 0, err
    return path, model


@pytest.mark.parametrize("chunk_rows", [None, 3000])
def test_evaluate_a_csv_table_with_string_and_missing_columns(table_csv, chunk_rows):
    path, model = table_csv
    extra = [] if chunk_rows is None else ["--chunk-rows", chunk_rows]
    code, out, err = run_exe_text(
        "evaluate", "--model", model, "--data", path, "--label-column", "label",
        "--format", "json", *extra,
    )  # fmt: skip
    assert code == 0, err
    assert "Row chunks" not in err
    summary = json.loads(out)
    assert summary["scores"]["labeled_rows"] == 20_000
    assert summary["scores"]["accuracy"] > 0.95


def test_report_on_a_csv_table_with_string_and_missing_columns(table_csv, tmp_path):
    pytest.importorskip("matplotlib")
    path, model = table_csv
    code, out, err = run_exe_text(
        "report", "--model", model, "--data", path, "--label-column", "label",
        "--out", tmp_path / "report.html", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["scores"]["labeled_rows"] == 20_000
    assert (tmp_path / "report.html").exists()
