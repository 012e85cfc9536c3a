"""Bad input files and arguments at the command line and through the Python API: each a
clear error naming the file (exit code 2), never a silent answer, a parser's internals or
exit code 4."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scalenc import EncoderClassifier, LRClassifier, cli, load, load_model, save_model
from scalenc.exceptions import DamagedDataError, InputError, ModelFileError
from scalenc.persist.files import _canonical_sha256


def _cli(capsys, *argv):
    """``scalenc argv`` in-process: (exit code, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A good CSV and Parquet table, a header-only CSV, random bytes
    named .csv, Parquet files damaged inside a row group and in the footer, and a graph's
    edges (good and damaged Parquet) with its labels."""
    root = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(300, 3)), columns=["a", "b", "c"])
    frame["y"] = (frame.a > 0).astype(int)
    frame.to_csv(root / "good.csv", index=False)
    (root / "header.csv").write_text("a,b,c,y\n")
    (root / "random.csv").write_bytes(rng.integers(0, 256, 4000, dtype=np.uint8).tobytes())
    frame.to_parquet(root / "good.parquet")
    _damage(root / "good.parquet", root / "rows.parquet", root / "footer.parquet")
    n = 60
    edges = np.array([(i, (i + 1) % n) for i in range(n)] + [(i, (i + 7) % n) for i in range(n)])
    pq.write_table(pa.table({"src": edges[:, 0], "dst": edges[:, 1]}), root / "edges.parquet")
    _damage(root / "edges.parquet", root / "edges_rows.parquet", root / "edges_footer.parquet")
    np.save(root / "edges.npy", edges)
    np.save(root / "y.npy", (np.arange(n) >= n // 2).astype(int))
    for name in ("random.npy", "random.npz"):
        (root / name).write_bytes(rng.integers(0, 256, 4000, dtype=np.uint8).tobytes())
    return root


def _damage(path, rows, footer):
    """``path`` with bytes of its first row group flipped (``rows``), and cut short of its
    footer (``footer``)."""
    data = bytearray(path.read_bytes())
    for i in range(4, 200):  # the first page's header and data
        data[i] ^= 0x5A
    rows.write_bytes(bytes(data))
    footer.write_bytes(path.read_bytes()[:-20])


# --- the silent ones --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cut", "what"),
    [
        (8, r"has 3 field\(s\) where the header has 4"),  # in the middle of a field
        (2, r"ends in an empty field, and the file in no line end"),  # just after a comma
    ],
)
def test_a_csv_cut_mid_line_is_refused_naming_its_line(files, tmp_path, capsys, cut, what):
    text = (files / "good.csv").read_text()
    (tmp_path / "cut.csv").write_text(text[: len(text) - cut])
    message = rf"cut\.csv: line 301 \('.*'\) {what}: the file looks cut short"
    with pytest.raises(DamagedDataError, match=message):
        load(tmp_path / "cut.csv", label_column="y")
    code, _, err = _cli(
        capsys, "convert", "--data", tmp_path / "cut.csv", "--label-column", "y",
        "--out", tmp_path / "cut.zarr",
    )  # fmt: skip
    assert code == 2
    assert re.search(message, err)
    assert not (tmp_path / "cut.zarr").exists()


# --- the unclear ones -------------------------------------------------------------------


def test_a_header_only_csv_is_refused_by_load_convert_and_fit(files, tmp_path, capsys):
    message = "header.csv has a header row (a, b, c, y) but no data rows"
    with pytest.raises(InputError, match=r"header\.csv has a header row \(a, b, c, y\) but no"):
        load(files / "header.csv", label_column="y")
    for argv in (
        ["convert", "--data", files / "header.csv", "--out", tmp_path / "h.zarr"],
        ["fit", "lrc", "--data", files / "header.csv", "--label-column", "y",
         "--model-out", tmp_path / "m"],
    ):  # fmt: skip
        code, _, err = _cli(capsys, *argv)
        assert code == 2 and message in err
        assert "npartitions" not in err


def test_random_bytes_named_csv_are_refused_naming_the_file(files, tmp_path, capsys):
    code, _, err = _cli(
        capsys, "fit", "lrc", "--data", files / "random.csv", "--label-column", "y",
        "--model-out", tmp_path / "m",
    )  # fmt: skip
    assert code == 2
    assert "random.csv is not CSV text: byte 0x" in err and "is not UTF-8" in err


@pytest.mark.parametrize(
    ("name", "what"),
    [("rows.parquet", "row group 0"), ("footer.parquet", "the footer")],
)
def test_a_damaged_parquet_table_exits_2_naming_the_file(files, tmp_path, capsys, name, what):
    with pytest.raises(DamagedDataError, match=rf"Cannot read {what} of the Parquet file .*"):
        X, y = load(files / name, label_column="y")
        LRClassifier().fit(X, y)
    code, _, err = _cli(
        capsys, "fit", "lrc", "--data", files / name, "--label-column", "y",
        "--model-out", tmp_path / "m",
    )  # fmt: skip
    assert code == 2
    assert f"Cannot read {what} of the Parquet file {files / name}" in err
    assert "The file is damaged or not Parquet" in err


@pytest.mark.parametrize(
    ("name", "what"),
    [("edges_rows.parquet", "row group 0"), ("edges_footer.parquet", "the footer")],
)
def test_a_damaged_edges_parquet_exits_2_naming_the_file(files, tmp_path, capsys, name, what):
    code, _, err = _cli(
        capsys, "fit", "encoder", "--edges", files / name, "--edge-columns", "src,dst",
        "--labels", files / "y.npy", "--model-out", tmp_path / "m",
    )  # fmt: skip
    assert code == 2, err
    assert f"Cannot read {what} of the Parquet file {files / name}" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "lrc", "--data", "{root}/random.npy", "--labels", "{root}/y.npy"],
        ["fit", "lrc", "--data", "{root}/random.npz"],
        ["fit", "encoder", "--edges", "{root}/random.npy", "--labels", "{root}/y.npy"],
        ["fit", "encoder", "--edges", "{root}/edges.npy", "--labels", "{root}/random.npy"],
    ],
    ids=["data-npy", "data-npz", "edges-npy", "labels-npy"],
)
def test_random_bytes_named_npy_or_npz_exit_2_naming_the_file(files, tmp_path, capsys, argv):
    argv = [a.format(root=files) for a in argv]
    code, _, err = _cli(capsys, *argv, "--model-out", tmp_path / "m")
    assert code == 2
    bad = next(a for a in argv if "random" in a)
    kind = bad[-4:]
    assert (
        f"Cannot read {bad} as {kind}: it does not start as a {kind} file does (damaged, or "
        f"another format named {kind})" in err
    )
    assert "pickled" not in err


def test_a_checkpoint_naming_a_regular_file_is_refused(files, tmp_path, capsys):
    (tmp_path / "afile").write_text("notes")
    with pytest.raises(InputError, match=r"The checkpoint '.*afile' is a file; a checkpoint is"):
        LRClassifier(checkpoint=str(tmp_path / "afile")).fit(
            *load(files / "good.parquet", label_column="y")
        )
    code, _, err = _cli(
        capsys, "fit", "lrc", "--data", files / "good.parquet", "--label-column", "y",
        "--model-out", tmp_path / "m", "--checkpoint", tmp_path / "afile",
    )  # fmt: skip
    assert code == 2
    assert "is a file; a checkpoint is a directory" in err and "Errno 17" not in err
    assert (tmp_path / "afile").read_text() == "notes"


@pytest.fixture(scope="module")
def graph_model(files, tmp_path_factory):
    """A model fitted on the graph alone, and the same with its class codes cut to 50
    nodes and its checksums recomputed (what a careless edit of the file would leave)."""
    root = tmp_path_factory.mktemp("graph_models")
    y, edges = np.load(files / "y.npy"), np.load(files / "edges.npy")
    save_model(EncoderClassifier().fit(None, y, graph=edges), root / "alone")
    save_model(EncoderClassifier().fit(None, y, graph=edges), root / "cut")
    _cut_codes(root / "cut", 50)
    return root


def _cut_codes(model, n):
    import hashlib

    meta = json.loads((model / "model.json").read_text())
    name = meta["model"]["state"]["_graph_codes"]["__array__"]
    np.save(model / name, np.load(model / name)[:n])
    entry = meta["files"][name]
    entry["sha256"] = hashlib.sha256((model / name).read_bytes()).hexdigest()
    entry["bytes"] = (model / name).stat().st_size
    entry["shape"] = [n]
    meta["checksum"] = _canonical_sha256(meta)
    (model / "model.json").write_text(json.dumps(meta))


def test_a_graph_alone_model_without_edges_asks_for_edges(files, graph_model, tmp_path, capsys):
    code, _, err = _cli(
        capsys, "predict", "--model", graph_model / "alone", "--out", tmp_path / "p.parquet"
    )
    assert code == 2
    assert "was fitted on the graph alone: pass --edges PATH" in err
    assert "required: --data" not in err


def test_a_features_model_without_data_asks_for_data(files, tmp_path, capsys):
    save_model(LRClassifier().fit(*load(files / "good.parquet", label_column="y")), tmp_path / "m")
    code, _, err = _cli(capsys, "predict", "--model", tmp_path / "m", "--out", tmp_path / "p.zarr")
    assert code == 2
    assert "the following arguments are required: --data (the rows to predict" in err


def test_edges_to_unknown_nodes_at_predict_get_a_message_for_predict(files):
    y, edges = np.load(files / "y.npy"), np.load(files / "edges.npy")
    model = EncoderClassifier().fit(None, y, graph=edges)
    bad = np.vstack([edges, [[3, 75]]])
    with pytest.raises(
        InputError,
        match=r"joins nodes 3 and 75, but the graph has 60 nodes \(ids 0 … 59\): one per "
        r"label at fit; at predict one per row of X, or the training nodes of a model "
        r"fitted on the graph alone\.",
    ):
        model.predict(None, graph=bad)


def test_a_graph_model_whose_codes_were_cut_is_refused_at_load(
    graph_model, files, tmp_path, capsys
):
    with pytest.raises(
        ModelFileError,
        match=r"EncoderClassifier\._graph_codes holds 20 node\(s\) of class code 1 among its "
        r"50 nodes; EncoderClassifier\.class_counts_ says the fit had 30\. The model file was "
        r"altered or damaged",
    ):
        load_model(graph_model / "cut")
    code, _, err = _cli(
        capsys, "predict", "--model", graph_model / "cut", "--edges", files / "edges.npy",
        "--out", tmp_path / "p.parquet",
    )  # fmt: skip
    assert code == 2 and "_graph_codes holds 20 node(s)" in err


# --- the command line's help ------------------------------------------------------------


def test_fit_help_shows_data_optional_and_fit_asks_for_data_without_edges(tmp_path, capsys):
    for argv in (["fit", "--help"], ["fit", "lrc", "--help"]):
        code, out, _ = _cli(capsys, *argv)
        assert code == 0
        assert "[--data PATH]" in out
        assert "required, but for a graph without node features" in " ".join(out.split())
    code, _, err = _cli(capsys, "fit", "lrc", "--model-out", tmp_path / "m")
    assert code == 2
    assert "scalenc fit: error: the following arguments are required: --data" in err


def test_a_storage_option_without_a_value_is_an_argument_error(files, tmp_path, capsys):
    """``--storage-option`` is parsed once, with the arguments: a pair without ``=`` stops
    the command before anything is read (argparse's exit 2 and layout); good pairs reach
    every read and write as one dict (``args.storage_option``)."""
    out = tmp_path / "m"
    argv = ["fit", "lrc", "--data", files / "good.csv", "--label-column", "y"]
    from scalenc.cli.parser import build_parser

    code, _, err = _cli(capsys, *argv, "--model-out", out, "--storage-option", "anon")
    assert code == 2 and not out.exists()
    assert err.startswith("usage: scalenc fit")
    assert "scalenc fit: error: --storage-option takes KEY=VALUE; got 'anon'." in err
    args = build_parser().parse_args(
        [*map(str, argv), "--model-out", str(out)]
        + ["--storage-option", "anon=false", "--storage-option", "key=k"]
    )
    assert args.storage_option == {"anon": False, "key": "k"}
