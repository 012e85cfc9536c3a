"""Evaluation by one reduction pass, and the HTML report checked structurally (PNGs decoded)."""

from __future__ import annotations

import base64
import json
import struct
import sys
from html.parser import HTMLParser

import dask
import dask.array as da
import numpy as np
import pytest
from _counting import TaskLog, counted
from conftest import make_blobs

from scalenc import CCDR, CCDRClassifier, NRBFNClassifier, cli, report
from scalenc.encoder.estimator import EncoderClassifier
from scalenc.persist import save_model

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.images, self.headings, self.scripts = [], [], [], 0
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "img":
            self.images.append((attrs.get("alt"), attrs.get("src", "")))
        if tag in ("script", "link", "iframe"):
            self.scripts += 1
        self._in_h2 = tag == "h2"

    def handle_data(self, data):
        if self._in_h2:
            self.headings.append(data.strip())
            self._in_h2 = False


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


def _png_size(src: str) -> tuple[int, int]:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    raw = base64.b64decode(src[len(prefix) :], validate=True)
    assert raw[:8] == PNG_SIGNATURE and raw[12:16] == b"IHDR"
    return struct.unpack(">II", raw[16:24])


def _check_pngs(parsed: _Page, titles: set[str]) -> None:
    found = {alt for alt, _ in parsed.images}
    assert titles <= found, found
    for _, src in parsed.images:
        width, height = _png_size(src)
        assert 300 <= width <= 1200 and 200 <= height <= 1000


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(n=500, p=6, K=3, seed=5, sep=1.2)
    return X, y


# --- evaluate ------------------------------------------------------------------------------


def test_evaluate_matches_sklearn_with_unlabeled_and_unknown_labels(data):
    from sklearn.metrics import classification_report, confusion_matrix

    X, y = data
    est = EncoderClassifier().fit(X, y)
    y_test = y.copy()
    y_test[:20] = -1  # unlabeled: left out
    y_test[20:25] = 7  # not a class of the model: counted as errors
    Xd = da.from_array(X, chunks=(64, -1))
    yd = da.from_array(y_test, chunks=64)
    with dask.config.set({"scalenc.split-every": 2}):
        scores = report.evaluate(est, Xd, yd)
    pred = est.predict(X)
    keep = y_test >= 0
    known = keep & (y_test != 7)
    assert scores["unlabeled_rows"] == 20 and scores["unknown_label_rows"] == 5
    assert scores["labeled_rows"] == keep.sum()
    assert scores["accuracy"] == pytest.approx(np.mean(pred[keep] == y_test[keep]))
    assert scores["confusion_matrix"] == confusion_matrix(y_test[known], pred[known]).tolist()
    ref = classification_report(y_test[known], pred[known], output_dict=True, labels=[0, 1, 2])
    for k in ("0", "1", "2"):
        assert scores["per_class"][k]["recall"] == pytest.approx(ref[k]["recall"])
        assert scores["per_class"][k]["support"] == ref[k]["support"]
    assert scores["passes"] == 1 and scores["seconds"] >= 0


def test_evaluate_is_one_tree_reduction(data):
    """The confusion counts are reduced on the workers: one compute reads each block of X
    once, every block's predictions become a K×K partial, and the partials are merged in
    a tree of the configured fan-in (``scalenc.split-every``) — no task gathers the n predictions, only the merged
    K×K counts reach the client."""
    from sklearn.metrics import confusion_matrix

    X, y = data
    est = EncoderClassifier().fit(X, y)
    Xd, reads = counted(X, 50)  # 10 row blocks
    with TaskLog() as tasks:
        with dask.config.set({"scalenc.split-every": 3}):
            scores = report.evaluate(est, Xd, da.from_array(y, chunks=50))
    assert tasks.computes == 1 and reads.per_block() == [1] * 10
    assert scores["confusion_matrix"] == confusion_matrix(y, est.predict(X)).tolist()
    # partials: K×K matrix + 2 counts + K, far below a block's 50 rows
    partials = {key for key, size in tasks.sizes.items() if size <= 3 * 3 + 2 + 3}
    final = max(partials, key=lambda key: tasks.depth(key, partials))
    # 10 block partials, then 3 + 1 + 1 merges of at most 3: a tree 1 + 3 levels deep
    assert len(partials) == 10 + 5 and tasks.depth(final, partials) == 4
    assert max(tasks.sizes.values()) == 50 * 6  # a block of X; nothing n-sized


def test_describe_model_is_json_ready(data):
    X, y = data
    est = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    facts = report.describe_model(est)
    json.dumps(facts, allow_nan=False)
    assert facts["kernel_"] == repr(est.kernel_)
    assert set(facts["cross_entropy_"]) == {"linear", "euclidean"}


# --- the HTML report -------------------------------------------------------------------------


def test_encoder_report_structure(data):
    X, y = data
    est = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X, y)
    evaluation = report.evaluate(
        est, da.from_array(X, chunks=(100, -1)), da.from_array(y, chunks=100)
    )
    page = report.build_report(
        est, evaluation=evaluation, metadata={"created": "now", "versions": {"numpy": "x"}}
    )
    parsed = _parse(page)
    assert parsed.tags[0] == "html" and parsed.scripts == 0  # self-contained: nothing fetched
    assert {"Model", "Parameters", "Fitted model", "Evaluation on data", "Plots"} <= set(
        parsed.headings
    )
    _check_pngs(parsed, {"Cross-entropy per kernel", "Class sizes", "Confusion matrix"})
    assert "numpy version" in page and f"{evaluation['accuracy']:.6g}" in page


def test_single_kernel_report_says_why_no_cross_entropy(data):
    X, y = data
    page = report.build_report(EncoderClassifier(kernels=("linear",)).fit(X, y))
    assert "One kernel was given" in page
    assert {alt for alt, _ in _parse(page).images} == {"Class sizes"}


def test_nrbfn_report_has_diagnostics_and_cv_curve(data):
    X, y = data
    est = NRBFNClassifier(random_state=0, alpha="cv", cv=3).fit(X, y)
    page = report.build_report(est)
    parsed = _parse(page)
    assert "Diagnostics" in parsed.headings
    for text in ("basis size r", "sigma_", "fitting_error_", "spectral_risk_"):
        assert text in page
    _check_pngs(parsed, {"Soft-KNN confidence", "Cross-validation curve over λ"})


def test_ccdr_report_has_eigenvalues_and_scatter(data):
    X, y = data
    est = CCDRClassifier(random_state=0).fit(X, y)
    xs, ys = report.sample_rows(
        da.from_array(X, chunks=(100, -1)), da.from_array(y, chunks=100), n=300
    )
    page = report.build_report(est, embedding=est.transform(xs), embedding_labels=ys)
    _check_pngs(_parse(page), {"CCDR eigenvalues", "CCDR embedding (2-D)"})
    transformer = CCDR(random_state=0).fit(X, y)
    _check_pngs(
        _parse(report.build_report(transformer)), {"CCDR eigenvalues", "CCDR embedding (2-D)"}
    )


def test_report_command_writes_html(data, tmp_path, capsys):
    X, y = data
    np.savez(tmp_path / "d.npz", X=X, y=y)
    save_model(EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y), tmp_path / "m")
    code = cli.main(
        [
            "report",
            "--model",
            str(tmp_path / "m"),
            "--data",
            str(tmp_path / "d.npz"),
            "--out",
            str(tmp_path / "r.html"),
            "--format",
            "json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["outputs"]["report"] == str(tmp_path / "r.html")
    assert summary["scores"]["accuracy"] > 0.8 and summary["passes"] == 1
    parsed = _parse((tmp_path / "r.html").read_text())
    _check_pngs(parsed, {"Cross-entropy per kernel", "Confusion matrix"})


def test_report_without_matplotlib_says_how_to_install(data, tmp_path, capsys, monkeypatch):
    X, y = data
    save_model(EncoderClassifier().fit(X, y), tmp_path / "m")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if absent
    code = cli.main(
        ["report", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "r.html")]
        + ["--format", "json"]
    )
    out, err = capsys.readouterr()
    assert code == cli.EXIT_BAD_INPUT
    assert 'pip install "scalenc[plot]"' in err
    assert json.loads(out)["error"]["type"] == "MissingPlotDependency"
    assert not (tmp_path / "r.html").exists()
