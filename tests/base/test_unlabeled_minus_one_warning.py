"""Labels −1, 0, 1: a warning that the −1 rows are taken as unlabeled, and ``unlabeled=None``
(``--unlabeled none``) to fit −1 as a class (issue 27).

Oracle: the class counts of the class-finding pass equal NumPy's on the same labels, across
chunkings; a fit with ``unlabeled=None`` on classes {−1, 0, 1} predicts the −1 rows as −1.
"""

import dask.array as da
import numpy as np
import pytest
from test_cli import run

from scalenc import CCDR, EncoderClassifier, LRClassifier, NRBFNClassifier, cli, load_model
from scalenc.engine.cluster import compute
from scalenc.engine.passes import class_counts_pass, find_classes, labeled_moments_pass
from scalenc.exceptions import DataWarning, InputError
from scalenc.math.labels import class_counts, encode, marker_looks_like_class

WARNED = r"the 120 rows labeled -1 are taken as unlabeled .* pass unlabeled=None"

ESTIMATORS = [
    NRBFNClassifier(n_neighbors=5, random_state=0),
    LRClassifier(),
    CCDR(n_components=2, n_neighbors=10, random_state=0),
    EncoderClassifier(kernels=("linear", "euclidean")),
]


def _ids(est):
    return type(est).__name__


def _three_classes(n_per_class=120, seed=0):
    """Classes −1, 0, 1 of ``n_per_class`` rows each, well apart, in sorted row order (so
    that row blocks of Dask input lack some classes)."""
    rng = np.random.default_rng(seed)
    y = np.repeat([-1, 0, 1], n_per_class)
    X = rng.normal(size=(y.size, 4)) + 4.0 * np.eye(4)[y + 1]
    return X, y


def _dask(X, y, rows=50):
    return da.from_array(X, chunks=(rows, -1)), da.from_array(y, chunks=rows)


# --- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "classes, counts, marker_rows, marker, expected",
    [
        ([0, 1], [100, 100], 100, -1, True),  # −1, 0, 1 balanced
        ([0, 1], [100, 100], 150, -1, True),  # −1 the largest class, within 1.5×
        ([0, 1], [10, 900], 10, -1, True),  # imbalanced, −1 no larger than a class
        ([-2, 0, 1, 2], [50, 50, 50, 50], 50, -1, True),  # −2..2
        ([-2, 1, 2], [50, 50, 50], 50, -1, True),  # ±1, ±2
        ([0.0, 1.0], [100, 100], 100, -1.0, True),  # integer-valued float labels
        ([0, 1], [100, 100], 151, -1, False),  # more than 1.5× the largest class
        ([0, 1], [100, 100], 300, -1, False),  # semi-supervised: most rows −1
        ([0, 1, 2], [100, 100, 100], 100, -1, False),  # semi-supervised: classes 0, 1, 2, …
        ([0, 1, 2, 3], [100, 100, 100, 100], 20, -1, False),
        ([1, 2], [100, 100], 100, -1, False),  # −1 does not mirror the classes
        (["a", "b"], [100, 100], 100, -1, False),  # string classes
        ([1], [100], 100, -1, False),  # one class: the fit refuses it with its own error
        ([0, 1], [100, 100], 0, -1, False),  # no −1 rows
        ([0, 1], [100, 100], 100, 99, False),  # another marker
        ([0, 1], [100, 100], 100, None, False),  # no marker
        ([0, 1], [100, 100], 100, True, False),  # a bool is not −1
    ],
)
def test_marker_looks_like_class(classes, counts, marker_rows, marker, expected):
    classes = np.array(classes, dtype=object if isinstance(classes[0], str) else None)
    assert marker_looks_like_class(classes, np.array(counts), marker_rows, marker) is expected


@pytest.mark.parametrize("rows", [7, 50, 119, 400])
def test_class_counts_pass_equals_numpy(rows):
    rng = np.random.default_rng(1)
    y = rng.choice([-1.0, 0.0, 1.0, 3.0, np.nan], size=360, p=[0.3, 0.2, 0.2, 0.2, 0.1])
    (found,) = compute(class_counts_pass(da.from_array(y, chunks=rows)))
    labeled = y[(y != -1) & ~np.isnan(y)]
    classes, counts = np.unique(labeled, return_counts=True)
    np.testing.assert_array_equal(found["classes"], classes)
    np.testing.assert_array_equal(found["counts"], counts)
    assert found["marker_rows"] == np.sum(y == -1)  # NaN rows are unlabeled, not −1 rows


def test_class_counts_of_object_labels_and_no_marker():
    y = np.array([-1, "a", None, "b", "a", -1], dtype=object)
    found = class_counts(y)
    assert found["classes"].tolist() == ["a", "b"] and found["counts"].tolist() == [2, 1]
    assert found["marker_rows"] == 2
    found = class_counts(np.array([-1, 0, 1, -1]), marker=None)
    assert found["classes"].tolist() == [-1, 0, 1] and found["counts"].tolist() == [2, 1, 1]
    assert found["marker_rows"] == 0


@pytest.mark.parametrize(
    "dtype, low, span",
    [(np.int8, -50, 100), (np.int64, -3, 5), (np.uint8, 0, 255), (np.uint64, 7, 9),
     (np.int32, 0, 70_000), (np.int64, 2**62, 3), (np.int64, 0, 0)],
)  # fmt: skip
@pytest.mark.parametrize("marker", [-1, 3, None])
def test_integer_labels_by_table_equal_the_sorted_count_and_search(dtype, low, span, marker):
    """Integers of a small range are counted by ``bincount`` and coded by a lookup table;
    the oracle is ``np.unique`` and ``np.searchsorted`` (wider ranges, the sorted way)."""
    if marker == -1 and np.dtype(dtype).kind == "u":
        marker = None
    rng = np.random.default_rng(span)
    y = (low + rng.integers(0, span + 1, 400)).astype(dtype)
    unlabeled = np.zeros(y.size, bool) if marker is None else y == marker
    classes, counts = np.unique(y[~unlabeled], return_counts=True)
    found = class_counts(y, marker)
    assert found["classes"].dtype == y.dtype
    np.testing.assert_array_equal(found["classes"], classes)
    np.testing.assert_array_equal(found["counts"], counts)
    codes = encode(y, classes, marker=marker)
    np.testing.assert_array_equal(codes[~unlabeled], np.searchsorted(classes, y[~unlabeled]))
    assert (codes[unlabeled] == -1).all()
    if classes.size > 1:  # a value not among the classes: refused, or the unknown code
        fewer = classes[1:]
        with pytest.raises(InputError, match="is not one of the classes"):
            encode(y, fewer, marker=marker)
        coded = encode(y, fewer, marker=marker, unknown=99)
        assert (coded[(y == classes[0]) & ~unlabeled] == 99).all()


def test_labeled_moments_pass_counts_the_marker_rows():
    """The encoder's first pass (class list and moments together) counts them too."""
    X, y = _three_classes()
    y = np.where(np.arange(y.size) % 7 == 0, np.nan, y)  # NaN rows: unlabeled, not −1 rows
    (out,) = compute(labeled_moments_pass(*_dask(X, y)))
    assert out["classes"].tolist() == [0, 1]
    assert out["marker_rows"] == np.sum(y == -1)
    np.testing.assert_array_equal(out["moments"]["n"], [np.sum(y == 0), np.sum(y == 1)])


# --- the warning -----------------------------------------------------------------------------


@pytest.mark.parametrize("dask_input", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=_ids)
def test_minus_one_zero_one_warns(est, dask_input):
    X, y = _three_classes()
    if dask_input:
        X, y = _dask(X, y)
    with pytest.warns(DataWarning, match=WARNED) as caught:
        model = type(est)(**est.get_params()).fit(X, y)
    assert model.classes_.tolist() == [0, 1]
    assert caught[0].filename == __file__  # points at the call of fit


def test_find_classes_warns_once_per_pass():
    X, y = _three_classes()
    with pytest.warns(DataWarning, match=WARNED) as caught:
        classes = find_classes(da.from_array(y, chunks=45))
    assert classes.tolist() == [0, 1] and len(caught) == 1


@pytest.mark.parametrize("est", ESTIMATORS, ids=_ids)
@pytest.mark.parametrize("K, fraction", [(3, 0.1), (3, 0.6), (2, 0.6)])
def test_no_warning_for_semi_supervised_data(est, K, fraction):
    """−1 beside classes 0, 1, 2 (any share of rows), or beside 0, 1 on most rows:
    semi-supervised data, fitted silently (pytest raises warnings as errors)."""
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(K), 100)
    X = rng.normal(size=(y.size, 4)) + 4.0 * np.eye(4)[y]
    y_semi = np.where(rng.random(y.size) < fraction, -1, y)
    model = type(est)(**est.get_params()).fit(*_dask(X, y_semi))
    assert model.classes_.tolist() == list(range(K))


def test_no_warning_without_the_marker_minus_one():
    X, y = _three_classes()
    LRClassifier(unlabeled=None).fit(X, y)
    LRClassifier(unlabeled=99).fit(X, np.where(y == -1, 99, y))  # 99 is no −1
    names = np.array(["a", "b"], dtype=object)[np.maximum(y, 0)]
    names[y == -1] = -1
    LRClassifier().fit(X, names)  # −1 beside string classes is a marker


# --- unlabeled=None: −1 is a class ------------------------------------------------------------


@pytest.mark.parametrize("dask_input", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize(
    "est",
    [EncoderClassifier(kernels=("linear", "euclidean")), *ESTIMATORS[:2]],
    ids=_ids,
)
def test_unlabeled_none_fits_minus_one_as_a_class(est, dask_input):
    X, y = _three_classes()
    Xf, yf = _dask(X, y) if dask_input else (X, y)
    model = type(est)(**{**est.get_params(), "unlabeled": None}).fit(Xf, yf)
    assert model.classes_.tolist() == [-1, 0, 1]
    pred = np.asarray(model.predict(Xf))
    assert np.mean(pred[y == -1] == -1) > 0.95 and np.mean(pred == y) > 0.95


def test_ccdr_unlabeled_none_keeps_minus_one():
    X, y = _three_classes()
    model = CCDR(n_components=2, n_neighbors=10, random_state=0, unlabeled=None).fit(*_dask(X, y))
    assert model.classes_.tolist() == [-1, 0, 1]


# --- the command: --unlabeled ---------------------------------------------------------------


@pytest.fixture(scope="module")
def minus_one_npz(tmp_path_factory):
    X, y = _three_classes()
    path = tmp_path_factory.mktemp("minus_one") / "d.npz"
    np.savez(path, X=X, y=y)
    return path


@pytest.mark.parametrize("method", ["nrbfn", "encoder"])
def test_fit_unlabeled_none_gives_three_classes(method, minus_one_npz, tmp_path, capsys):
    argv = ["--data", minus_one_npz, "--model-out", tmp_path / "m", "--unlabeled", "none"]
    code, summary, err = run(capsys, "fit", method, *argv)
    assert code == 0, err
    assert summary["params"]["unlabeled"] is None
    assert summary["model"]["classes_"] == [-1, 0, 1]
    assert load_model(tmp_path / "m").classes_.tolist() == [-1, 0, 1]


@pytest.mark.filterwarnings("default::scalenc.exceptions.DataWarning")  # shown, not raised
def test_fit_without_unlabeled_warns(minus_one_npz, tmp_path, capsys, recwarn):
    """The command shows the warning (in its log on stderr, or, where the command leaves
    the display to Python, as a warning), with the option that keeps −1 a class."""
    argv = ["--data", minus_one_npz, "--model-out", tmp_path / "m", "--unlabeled", "-1"]
    code, summary, err = run(capsys, "fit", "lrc", *argv)
    assert code == 0, err
    shown = err + "\n".join(str(w.message) for w in recwarn)
    assert "y holds the labels -1 and [0, 1]: the 120 rows labeled -1" in shown
    assert "`--unlabeled none` on the command" in shown
    assert summary["params"]["unlabeled"] == -1 and summary["model"]["classes_"] == [0, 1]


def test_fit_unlabeled_values(minus_one_npz, tmp_path, capsys):
    base = ["fit", "lrc", "--data", minus_one_npz, "--model-out", tmp_path / "m", "--overwrite"]
    code, summary, err = run(capsys, *base, "--unlabeled", "1")  # rows of class 1 unlabeled
    assert code == 0, err
    assert summary["params"]["unlabeled"] == 1 and summary["model"]["classes_"] == [-1, 0]
    code, summary, err = run(capsys, *base, "--unlabeled", "unknown")
    assert code == 0, err
    assert summary["params"]["unlabeled"] == "unknown"
    assert summary["model"]["classes_"] == [-1, 0, 1]


def test_unlabeled_and_set_unlabeled_are_refused_together(minus_one_npz, tmp_path, capsys):
    argv = ["--data", minus_one_npz, "--model-out", tmp_path / "m"]
    argv += ["--unlabeled", "none", "--set", "unlabeled=-1"]
    code, summary, _ = run(capsys, "fit", "lrc", *argv)
    assert code == cli.EXIT_BAD_INPUT
    assert "--unlabeled none and --set unlabeled=-1 both set" in summary["error"]["message"]
    assert not (tmp_path / "m").exists()


def test_job_fit_step_takes_unlabeled(minus_one_npz, tmp_path, capsys):
    job = tmp_path / "job.toml"
    job.write_text(
        f'[[step]]\ncommand = "fit"\nmethod = "lrc"\ndata = "{minus_one_npz}"\n'
        'model_out = "m"\nunlabeled = "none"\n'
    )
    code, summary, err = run(capsys, "run", job)
    assert code == 0, err
    assert load_model(tmp_path / "m").classes_.tolist() == [-1, 0, 1]
