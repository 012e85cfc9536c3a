"""A broad, fixed benchmark of scalenc's defaults beside scikit-learn's (issue 36).

Every public classification dataset of 2 000 to 600 000 rows available offline is listed
below, fixed before any fit was run and never chosen by results: every classification
set of PMLB's last commit before Git LFS in that range, and the papers' sets of
``../shared/data`` in it. The list is split in two halves with a stated seed: defaults
are tuned on ``tune`` and reported on ``report``, each half apart; the sets on which
earlier benchmarks shaped the defaults are reported on their own (``shaped``). Every
estimator runs with its defaults beside ``SVC()``, 5-NN, LDA, Nyström + logistic
regression and gradient boosting, one process per fit.

Datasets
--------
PMLB at commit ``0820182add20998ed3f88b30efd273107286c695`` (2020-08-18): the parent of
"track gz file with lfs", the last commit whose ``datasets/*/*.tsv.gz`` are gzip files
(later ones are Git LFS pointers). ``PMLB_SETS`` is every dataset whose
``metadata.yaml`` says ``task: classification`` and whose ``summary_stats.csv`` counts
2 000 to 600 000 rows, written once by ``--list-pmlb DIR``. Two rules exclude, no other:

* a PMLB set that is one of the papers' sets (mnist, satimage: the same rows × features):
  the papers' copy is used, with its standard split;
* a PMLB set whose rows (as a multiset, the header aside) are those of a set before it in
  alphabetical order: kr_vs_kp (the rows of chess).

The papers' sets of at least 2 000 rows (``PAPER_SETS``): satimage, mnist, usps and
isolet with their standard train/test splits; yaleb32, cora and citeseer with the common
split below (their features only: the Planetoid split of cora and citeseer labels 140 and
120 rows for graph-based learning, which none of these estimators does).

``shaped`` (``SHAPED_ON``): the sets an earlier benchmark chose a default on before this
list was written: the seven of ``peers.py`` (issue 12: letter, adult, shuttle, connect_4,
mnist, fars, kddcup) and the ten of ``nrbfn_basis_curves.py`` (issue 26, nRBFN's basis
cost rule: mnist, usps, isolet, satimage, connect_4, fars, adult, krkopt, letter, magic).

Halves (``halves``): the other sets, sorted by (rows, name), taken in consecutive pairs;
in each pair ``numpy.random.default_rng(36).permutation(2)`` puts one set in ``tune`` and
the other in ``report`` (a last set without a pair: ``integers(2)``, 0 = tune), so that
both halves span the sizes. ``--list`` prints the list with its halves.

Protocol
--------
* Split: the standard train/test split where the set has one; otherwise stratified
  70 / 30, seed 0 (scikit-learn's ``train_test_split``), the rows of a class with a single
  row going to the training side.
* Scaling: each feature mapped to [-1, 1] by the training rows' minimum and maximum (test
  values may fall outside); a feature constant on the training rows is 0 on both sides.
  Float64 NumPy arrays; scalenc on its default threaded Dask scheduler.
* Methods (``METHODS``; ``--methods``, default every estimator's defaults): scalenc's
  ``NRBFNClassifier()``, ``EncoderClassifier()``, ``LRClassifier()``,
  ``CCDRClassifier()``, and named variants (``nrbfn-paper``: ``alpha=1e-13``;
  ``nrbfn-cv``: ``alpha="cv"``; ``encoder-linear``; ``encoder-3k``: the kernels linear,
  euclidean and spearman); scikit-learn's ``SVC()``, ``KNeighborsClassifier()`` (5-NN),
  ``LinearDiscriminantAnalysis()``, ``Nystroem(n_components=1000)`` +
  ``LogisticRegression(max_iter=1000)``, ``HistGradientBoostingClassifier()``.
  ``random_state=0`` wherever an estimator has one, nothing else set. Any method takes
  parameters in brackets for tuning runs: ``--methods "nrbfn[alpha=1e-9],svc[C=10]"``.
* Order: datasets by rows, smallest first; within a dataset SVC first, then every scalenc
  method (each fit back to back with SVC's), then the other peers.
* Each (dataset, method) runs in a fresh process that reads the split from ``.npy`` files:
  test error %, fit and predict seconds, peak RSS (``ru_maxrss``, the data included) and
  the RSS once the data are loaded, every warning, and what the defaults chose (nRBFN's
  basis size, the size its rule asked for, ``alpha_``, ``fit_mode_``; the encoder's
  ``kernel_``; CCDR's ``n_components_``; SVC's support vectors). ``--time-budget`` seconds
  (default 600) bound the whole process; one that overruns is killed and recorded as "did
  not finish in T s", a result like any other, SVC's included. No method's rows are capped.
  The process has ``OMP_WAIT_POLICY=PASSIVE`` unless the variable is set: results are the
  same, and on a shared machine busy-waiting OpenMP threads took gradient boosting's fit
  on 1 400 rows past 300 s (12 s with passive waits).
* A method whose estimator has the same parameters as one already run on the dataset by
  the same code (``encoder`` and ``encoder-linear`` while the default kernels are linear)
  is not fitted twice: its cell copies the result and says ``same_as``.
* ``--out`` is rewritten after every cell, and a run skips the cells it holds: a stopped
  run restarts where it was. Each cell records the code's commit and the load average.
* ``--quick``: satimage, usps, banana and phoneme (or ``--datasets``), each subsampled
  (stratified, seed 0) to ``--quick-rows`` rows (default 2000), a 120 s budget.

Seconds are wall-clock on whatever else runs on the machine: compare them within a run.

Examples
--------
Get PMLB's history (no checkout: the files at its head are LFS pointers)::

    git clone --no-checkout https://github.com/EpistasisLab/pmlb ~/pmlb
    export SCALENC_PMLB_DIR=~/pmlb

then, from the repository root (the papers' data in ``../shared/data`` or
``$SCALENC_DATA_DIR``)::

    python benchmarks/defaults.py --list
    python benchmarks/defaults.py --half tune --max-rows 60000 --time-budget 300 \\
        --methods all --out tune.json
    python benchmarks/defaults.py --report tune.json > tune.md
    python benchmarks/defaults.py --quick --out quick.json
    python benchmarks/defaults.py --list-pmlb ~/pmlb      # how PMLB_SETS was written
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from defaults_report import report  # noqa: E402

PMLB_URL = "https://github.com/EpistasisLab/pmlb"
PMLB_COMMIT = "0820182add20998ed3f88b30efd273107286c695"
MIN_ROWS, MAX_ROWS = 2_000, 600_000
HALF_SEED = 36
SPLIT_SEED, TEST_SHARE = 0, 0.3

# (name, rows, features, classes): `--list-pmlb DIR` at PMLB_COMMIT, written once.
PMLB_SETS = (
    ("adult", 48842, 14, 2),
    ("agaricus_lepiota", 8145, 22, 2),
    ("allbp", 3772, 29, 3),
    ("allhyper", 3771, 29, 4),
    ("allhypo", 3770, 29, 3),
    ("allrep", 3772, 29, 4),
    ("ann_thyroid", 7200, 21, 3),
    ("banana", 5300, 2, 2),
    ("chess", 3196, 36, 2),
    ("churn", 5000, 20, 2),
    ("clean2", 6598, 168, 2),
    ("coil2000", 9822, 85, 2),
    ("connect_4", 67557, 42, 3),
    ("dis", 3772, 29, 2),
    ("dna", 3186, 180, 3),
    ("fars", 100968, 29, 8),
    ("hypothyroid", 3163, 25, 2),
    ("kddcup", 494020, 41, 23),
    # kr_vs_kp (3196 rows): the same rows as chess
    ("krkopt", 28056, 6, 18),
    ("led24", 3200, 24, 10),
    ("led7", 3200, 7, 10),
    ("letter", 20000, 16, 26),
    ("magic", 19020, 10, 2),
    ("mfeat_factors", 2000, 216, 10),
    ("mfeat_fourier", 2000, 76, 10),
    ("mfeat_karhunen", 2000, 64, 10),
    ("mfeat_morphological", 2000, 6, 10),
    ("mfeat_pixel", 2000, 240, 10),
    ("mfeat_zernike", 2000, 47, 10),
    # mnist (70000 rows): the papers' copy (same rows × features), with its standard split
    ("mushroom", 8124, 22, 2),
    ("nursery", 12958, 8, 4),
    ("optdigits", 5620, 64, 10),
    ("page_blocks", 5473, 10, 5),
    ("pendigits", 10992, 16, 10),
    ("phoneme", 5404, 5, 2),
    ("ring", 7400, 20, 2),
    # satimage (6435 rows): the papers' copy (same rows × features), with its standard split
    ("segmentation", 2310, 19, 7),
    ("shuttle", 58000, 9, 7),
    ("sleep", 105908, 13, 5),
    ("spambase", 4601, 57, 2),
    ("splice", 3188, 60, 3),
    ("texture", 5500, 40, 11),
    ("titanic", 2201, 3, 2),
    ("twonorm", 7400, 20, 2),
    ("waveform_21", 5000, 21, 3),
    ("waveform_40", 5000, 40, 3),
    ("wine_quality_white", 4898, 11, 7),
)

# Classification sets of PMLB in range that are left out, and why.
PMLB_EXCLUDED = {
    "mnist": "the papers' copy (same rows × features), with its standard split",
    "satimage": "the papers' copy (same rows × features), with its standard split",
    "kr_vs_kp": "the same rows as chess",
}

# (name, rows, features, classes, split) of ../shared/data with at least MIN_ROWS rows.
PAPER_SETS = (
    ("yaleb32", 2414, 1024, 38, "70/30"),
    ("cora", 2708, 1433, 7, "70/30"),
    ("citeseer", 3312, 3703, 6, "70/30"),
    ("satimage", 6435, 36, 6, "standard"),
    ("isolet", 7797, 617, 26, "standard"),
    ("usps", 9298, 256, 10, "standard"),
    ("mnist", 70000, 784, 10, "standard"),
)

SHAPED_ON = {
    "letter": "peers.py (issue 12), nrbfn_basis_curves.py (issue 26)",
    "adult": "peers.py (issue 12), nrbfn_basis_curves.py (issue 26)",
    "shuttle": "peers.py (issue 12)",
    "connect_4": "peers.py (issue 12), nrbfn_basis_curves.py (issue 26)",
    "mnist": "peers.py (issue 12), nrbfn_basis_curves.py (issue 26)",
    "fars": "peers.py (issue 12), nrbfn_basis_curves.py (issue 26)",
    "kddcup": "peers.py (issue 12)",
    "usps": "nrbfn_basis_curves.py (issue 26)",
    "isolet": "nrbfn_basis_curves.py (issue 26)",
    "satimage": "nrbfn_basis_curves.py (issue 26)",
    "krkopt": "nrbfn_basis_curves.py (issue 26)",
    "magic": "nrbfn_basis_curves.py (issue 26)",
}

QUICK_SETS = ("satimage", "usps", "banana", "phoneme")


class Dataset(NamedTuple):
    name: str
    rows: int
    features: int
    classes: int
    source: str  # "pmlb" or "papers"
    split: str  # "standard" or "70/30"


def datasets() -> list[Dataset]:
    """The fixed list, by (rows, name)."""
    sets = [Dataset(n, r, p, k, "pmlb", "70/30") for n, r, p, k in PMLB_SETS]
    sets += [Dataset(n, r, p, k, "papers", s) for n, r, p, k, s in PAPER_SETS]
    return sorted(sets, key=lambda d: (d.rows, d.name))


def halves(sets: list[Dataset] | None = None) -> dict[str, str]:
    """Each dataset's half: ``shaped``, ``tune`` or ``report`` (see the module's docstring)."""
    sets = datasets() if sets is None else sorted(sets, key=lambda d: (d.rows, d.name))
    out = {d.name: "shaped" for d in sets if d.name in SHAPED_ON}
    rest = [d.name for d in sets if d.name not in SHAPED_ON]
    rng = np.random.default_rng(HALF_SEED)
    for i in range(0, len(rest) - 1, 2):
        first, second = ("tune", "report") if rng.permutation(2)[0] == 0 else ("report", "tune")
        out[rest[i]], out[rest[i + 1]] = first, second
    if len(rest) % 2:
        out[rest[-1]] = ("tune", "report")[int(rng.integers(2))]
    return out


# --- methods --------------------------------------------------------------------------------

SCALENC = (
    "nrbfn",
    "nrbfn-paper",
    "nrbfn-cv",
    "encoder",
    "encoder-linear",
    "encoder-3k",
    "lrc",
    "ccdr",
)
PEERS = ("svc", "knn5", "lda", "nystroem-lr", "hgb")
ORDER = ("svc",) + SCALENC + PEERS[1:]  # SVC, then scalenc back to back, then the rest
DEFAULTS = ("nrbfn", "encoder", "lrc", "ccdr", "svc", "knn5", "lda", "nystroem-lr", "hgb")
LABELS = {
    "nrbfn": "NRBFNClassifier()",
    "nrbfn-paper": "NRBFNClassifier(alpha=1e-13, n_basis=None, width=1.0)",
    "nrbfn-cv": "NRBFNClassifier(alpha='cv', n_basis=None, width=1.0)",
    "encoder": "EncoderClassifier()",
    "encoder-linear": "EncoderClassifier(kernels=('linear',))",
    "encoder-3k": "EncoderClassifier(kernels=('linear', 'euclidean', 'spearman'))",
    "lrc": "LRClassifier()",
    "ccdr": "CCDRClassifier()",
    "svc": "SVC()",
    "knn5": "5-NN",
    "lda": "LDA",
    "nystroem-lr": "Nyström + LR",
    "hgb": "HistGradientBoosting",
}
METHODS = tuple(LABELS)


def parse_method(text: str) -> tuple[str, dict]:
    """A method's name (a key of ``LABELS``) and the parameters set on it:
    ``"nrbfn[alpha=1e-9, n_basis=300]"`` is ``("nrbfn", {"alpha": 1e-9, "n_basis": 300})``."""
    match = re.fullmatch(r"([\w-]+)(?:\[(.*)\])?", text.strip())
    if match is None or match.group(1) not in LABELS:
        raise ValueError(f"unknown method {text!r}; choose among {', '.join(METHODS)}, each "
                         "with parameters in brackets if you like: nrbfn[alpha=1e-9]")  # fmt: skip
    params = {}
    if match.group(2):
        call = ast.parse(f"f({match.group(2)})", mode="eval").body
        if call.args:
            raise ValueError(f"{text!r}: give parameters by name, e.g. nrbfn[alpha=1e-9]")
        params = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return match.group(1), params


def split_methods(text: str) -> list[str]:
    """``--methods``: a comma list whose brackets may hold commas."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text + ","):
        depth += (char in "[(") - (char in "])")
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [p for p in parts if p]


def label(method: str) -> str:
    name, params = parse_method(method)
    given = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return LABELS[name] + (f" with {given}" if given else "")


def order_key(method: str) -> tuple[int, str]:
    """SVC, then the scalenc methods, then the other peers; variants after their method."""
    return ORDER.index(parse_method(method)[0]), method


def make_estimator(method: str):
    """The estimator ``method`` names (see ``parse_method``)."""
    name, params = parse_method(method)
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC

    import scalenc

    return {
        "nrbfn": lambda: scalenc.NRBFNClassifier(random_state=0),
        "nrbfn-paper": lambda: scalenc.NRBFNClassifier(
            alpha=1e-13, n_basis=None, width=1.0, random_state=0
        ),
        "nrbfn-cv": lambda: scalenc.NRBFNClassifier(
            alpha="cv", n_basis=None, width=1.0, random_state=0
        ),
        "encoder": lambda: scalenc.EncoderClassifier(),
        "encoder-linear": lambda: scalenc.EncoderClassifier(kernels=("linear",)),
        "encoder-3k": lambda: scalenc.EncoderClassifier(
            kernels=("linear", "euclidean", "spearman")
        ),
        "lrc": lambda: scalenc.LRClassifier(),
        "ccdr": lambda: scalenc.CCDRClassifier(random_state=0),
        "svc": lambda: SVC(),
        "knn5": lambda: KNeighborsClassifier(),
        "lda": lambda: LinearDiscriminantAnalysis(),
        "nystroem-lr": lambda: make_pipeline(
            Nystroem(n_components=1000, random_state=0), LogisticRegression(max_iter=1000)
        ),
        "hgb": lambda: HistGradientBoostingClassifier(random_state=0),
    }[name]().set_params(**params)


def estimator_key(method: str) -> str:
    """The estimator's class and parameters: methods with equal keys fit the same model."""
    model = make_estimator(method)
    return f"{type(model).__name__}{sorted(model.get_params(deep=True).items())!r}"


# --- data -----------------------------------------------------------------------------------


class DataMissing(Exception):
    """A dataset's source is absent."""


def pmlb_hint(path) -> str:
    return (
        f"get PMLB's history with `git clone --no-checkout {PMLB_URL} DIR` and pass "
        f"--pmlb DIR (or set SCALENC_PMLB_DIR); {path or 'no --pmlb'} was given"
    )


def git_show(repo: Path, commit: str, path: str) -> bytes:
    """The bytes of ``commit:path`` in the PMLB clone or mirror ``repo``."""
    if repo is None or not Path(repo).exists():
        raise DataMissing(pmlb_hint(repo))
    git_dir = Path(repo) / ".git" if (Path(repo) / ".git").exists() else Path(repo)
    proc = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                          capture_output=True)  # fmt: skip
    if proc.returncode:
        raise DataMissing(
            f"git could not read {commit[:10]}:{path} from {repo} "
            f"({proc.stderr.decode(errors='replace').strip()}); {pmlb_hint(repo)}"
        )
    return proc.stdout


def read_pmlb(name: str, repo: Path, commit: str = PMLB_COMMIT):
    """X (float64) and y (codes 0..K-1) of PMLB's ``name`` at ``commit``."""
    import pandas as pd

    raw = git_show(repo, commit, f"datasets/{name}/{name}.tsv.gz")
    if not raw.startswith(b"\x1f\x8b"):
        raise DataMissing(f"{name}.tsv.gz at {commit[:10]} is not gzip (a Git LFS pointer?)")
    frame = pd.read_csv(io.BytesIO(gzip.decompress(raw)), sep="\t")
    y = np.unique(frame.pop("target").to_numpy(), return_inverse=True)[1]
    return frame.to_numpy(dtype=np.float64), y.astype(np.int64)


def load(ds: Dataset, args) -> dict:
    """The dataset's arrays (``X``, ``y``; ``train``, ``test`` for a standard split),
    cached as ``.npz`` under ``--cache-dir`` and checked against the fixed list."""
    tag = PMLB_COMMIT[:10] if ds.source == "pmlb" else "papers"
    cached = Path(args.cache_dir) / f"{ds.name}-{tag}.npz" if args.cache_dir else None
    if cached is not None and cached.exists():
        with np.load(cached) as f:
            return dict(f)
    if ds.source == "pmlb":
        X, y = read_pmlb(ds.name, args.pmlb)
        data = {"X": X, "y": y}
    else:
        path = Path(args.papers_dir) / f"{ds.name}.npz"
        if not path.exists():
            raise DataMissing(f"{path} is absent (set SCALENC_DATA_DIR or --papers-dir)")
        with np.load(path) as f:
            data = {"X": f["X"].astype(np.float64), "y": f["y"].astype(np.int64)}
            if ds.split == "standard":
                data["train"], data["test"] = f["train_idx"], f["test_idx"]
    shape = (data["y"].size, data["X"].shape[1], np.unique(data["y"]).size)
    if shape != (ds.rows, ds.features, ds.classes) or not np.isfinite(data["X"]).all():
        raise ValueError(f"{ds.name}: read {shape} (finite: {np.isfinite(data['X']).all()}), "
                         f"the list says {(ds.rows, ds.features, ds.classes)}")  # fmt: skip
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp.npz")
        np.savez(tmp, **data)
        os.replace(tmp, cached)
    return data


def subsample(y: np.ndarray, rows: np.ndarray, size: int, seed: int = SPLIT_SEED) -> np.ndarray:
    """``size`` of ``rows``, stratified by ``y`` where every class has two rows or more."""
    from sklearn.model_selection import train_test_split

    if size >= rows.size:
        return rows
    counts = np.bincount(y[rows])
    stratify = y[rows] if counts[counts > 0].min() >= 2 else None
    return np.sort(train_test_split(rows, train_size=size, stratify=stratify,
                                    random_state=seed)[0])  # fmt: skip


def split(
    data: dict, quick_rows: int | None, seed: int = SPLIT_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """Training and test rows: the standard split, else stratified 70 / 30 (``seed``,
    0 for the tables; ``--split-seed`` draws others to measure a split's noise)."""
    from sklearn.model_selection import train_test_split

    y = data["y"]
    if "train" in data:
        train, test = data["train"], data["test"]
        if quick_rows:
            train = subsample(y, train, round(quick_rows * (1 - TEST_SHARE)), seed)
            test = subsample(y, test, quick_rows - train.size, seed)
        return train, test
    rows = np.arange(y.size)
    if quick_rows:
        rows = subsample(y, rows, quick_rows, seed)
    single = np.isin(y[rows], np.flatnonzero(np.bincount(y[rows]) == 1))
    train, test = train_test_split(rows[~single], test_size=TEST_SHARE,
                                   stratify=y[rows[~single]], random_state=seed)  # fmt: skip
    return np.sort(np.concatenate([train, rows[single]])), np.sort(test)


def scale(X: np.ndarray, Xt: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Both sides mapped to [-1, 1] by the training rows' range; constant features 0."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    constant = hi == lo
    span = np.where(constant, 1.0, hi - lo)

    def apply(A):
        return np.where(constant, 0.0, 2.0 * (A - lo) / span - 1.0)

    return apply(X), apply(Xt), int(constant.sum())


def prepare(ds: Dataset, args, workdir: Path) -> dict:
    """Split and scale ``ds``, write its four arrays to ``workdir``; its description."""
    data = load(ds, args)
    X, y = data["X"], data["y"]
    train, test = split(data, args.quick_rows if args.quick else None, args.split_seed)
    Xs, Xts, constant = scale(X[train], X[test])
    for key, value in {"X": Xs, "y": y[train], "Xt": Xts, "yt": y[test]}.items():
        np.save(workdir / f"{key}.npy", value)
    counts = np.bincount(y[np.concatenate([train, test])], minlength=ds.classes)
    return {
        "rows": ds.rows,
        "features": ds.features,
        "classes": ds.classes,
        "source": ds.source,
        "split": ds.split + (f", subsampled to {train.size + test.size}" if args.quick else ""),
        "train_rows": int(train.size),
        "test_rows": int(test.size),
        "constant_features": constant,
        "largest_class_pct": round(100 * float(counts.max() / counts.sum()), 1),
        "smallest_class_rows": int(counts[counts > 0].min()),
    }


# --- one cell, in its own process -----------------------------------------------------------


def plain(value):
    """``value`` as JSON: NumPy scalars and arrays to Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def fitted_notes(model) -> dict:
    """The fitted attributes that say what the defaults chose."""
    notes: dict = {}
    if hasattr(model, "basis_"):  # nRBFN
        plan = getattr(model, "memory_plan_", None) or {}
        notes["basis_r"] = int(model.basis_.shape[0])
        notes["basis_wanted"] = plan.get("basis", {}).get("wanted")
        notes["max_basis_source"] = plan.get("max_basis_source")
        notes["soft_knn"] = plan.get("soft_knn", {}).get("mode")
        for name in (
            "alpha_",
            "fit_mode_",
            "sigma_",
            "rank_",
            "n_neighbors_",
            "cv_error_",
            "basis_growth_",
            "normalize_",
        ):
            notes[name] = getattr(model, name, None)
    for name in ("kernel_", "cross_entropy_", "n_components_", "n_passes_"):
        if getattr(model, name, None) is not None:
            notes[name] = getattr(model, name)
    if hasattr(model, "support_"):  # SVC
        notes["support_vectors"] = int(model.support_.size)
    if hasattr(model, "n_iter_") and not hasattr(model, "basis_"):  # HistGradientBoosting
        notes["n_iter_"] = model.n_iter_
    if hasattr(model, "steps"):  # Nyström + LR
        notes["n_iter_"] = int(np.max(model[-1].n_iter_))
    if hasattr(model, "stage_times_"):
        notes["stage_times_"] = model.stage_times_
    return plain(notes)


def rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def run_cell(method: str, workdir: Path) -> dict:
    """Fit ``method`` on the split in ``workdir``, predict the test side."""
    X, y = np.load(workdir / "X.npy"), np.load(workdir / "y.npy")
    Xt, yt = np.load(workdir / "Xt.npy"), np.load(workdir / "yt.npy")
    out: dict = {"data_mb": rss_mb()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = make_estimator(method)
            t0 = time.perf_counter()
            model.fit(X, y)
            out["fit_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            pred = np.asarray(model.predict(Xt))
            out["predict_s"] = time.perf_counter() - t0
            out["error_pct"] = 100.0 * float(np.mean(pred != yt))
            out["notes"] = fitted_notes(model)
        except BaseException as exc:  # noqa: BLE001 - a failing default is a result
            out["failed"] = f"{type(exc).__name__}: {exc}"
            out["traceback"] = traceback.format_exc()[-3000:]
    seen: dict = {}
    for w in caught:
        text = f"{w.category.__name__}: {w.message}"
        seen[text] = seen.get(text, 0) + 1
    out["warnings"] = [t if n == 1 else f"{t} (×{n})" for t, n in seen.items()]
    out["peak_mb"] = rss_mb()
    return out


def cell_env() -> dict:
    """The cell's environment: OpenMP's idle threads sleep unless told otherwise (on a
    loaded machine, busy-waiting threads took HistGradientBoosting's fit on 1 400 rows
    past 300 s; 12 s with passive waits; the results are the same)."""
    return dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))


def run_in_subprocess(method: str, workdir: Path, budget: float) -> dict:
    """``run_cell`` in a fresh Python process, killed after ``budget`` seconds."""
    result = workdir / "result.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--cell", method, "--cell-dir", str(workdir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, env=cell_env())
    except subprocess.TimeoutExpired:
        return {"failed": f"did not finish in {budget:g} s (load, fit and predict)",
                "timed_out": True, "warnings": []}  # fmt: skip
    if result.exists():
        return json.loads(result.read_text())
    return {
        "failed": f"process ended with code {proc.returncode} after "
        f"{time.perf_counter() - t0:.0f} s"
        + (" (killed: out of memory?)" if proc.returncode < 0 else ""),
        "stderr": proc.stderr[-3000:],
        "warnings": [],
    }


# --- runs -----------------------------------------------------------------------------------


def code_version() -> str:
    """The last commit that changed the scalenc imported, ``+dirty`` when its files
    differ from it (commits to the benchmarks alone do not change it)."""
    import scalenc

    root = Path(scalenc.__file__).resolve().parents[1]
    try:
        git = ["git", "-C", str(root)]
        head = subprocess.run(git + ["log", "-1", "--format=%h", "--abbrev=10", "--", "scalenc"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(git + ["status", "--porcelain", "--", "scalenc"],
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return f"{scalenc.__version__} (not a git checkout)"
    return head + ("+dirty" if dirty else "")


def protocol(args) -> dict:
    """What makes two runs' cells comparable: a results file holds one protocol."""
    return {
        "pmlb_commit": PMLB_COMMIT,
        "split": f"standard, else stratified {1 - TEST_SHARE:.0%}/{TEST_SHARE:.0%} "
        f"seed {args.split_seed}",
        "scaling": "[-1, 1] by the training rows' min/max; constant features 0",
        "quick_rows": args.quick_rows if args.quick else None,
        "time_budget_s": args.time_budget,
        "omp_wait_policy": cell_env()["OMP_WAIT_POLICY"],
    }


def read_results(path: Path | None, proto: dict) -> dict:
    if path is None or not path.exists():
        return {"protocol": proto, "runs": [], "datasets": {}}
    results = json.loads(path.read_text())
    if results.get("protocol") != proto:
        raise SystemExit(
            f"error: {path} holds cells of another protocol ({results.get('protocol')}), "
            f"not {proto}: pass another --out"
        )
    return results


def write_results(path: Path | None, results: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    os.replace(tmp, path)


def selected(args) -> list[Dataset]:
    sets = datasets()
    half = halves(sets)
    if args.datasets:
        known = {d.name: d for d in sets}
        chosen = [known[n] for n in args.datasets]
    elif args.quick:
        chosen = [d for d in sets if d.name in QUICK_SETS]
    else:
        chosen = [d for d in sets if args.half == "all" or half[d.name] == args.half]
    return [d for d in chosen if args.min_rows <= d.rows <= args.max_rows]


def run_dataset(ds: Dataset, entry: dict, methods: list[str], keys: dict, code: str, args):
    """Every method of ``methods`` not yet in ``entry["cells"]`` on ``ds``, in order; the
    results file rewritten after each."""
    cells = entry["cells"]
    with tempfile.TemporaryDirectory(prefix=f"defaults-{ds.name}-") as tmp:
        entry["info"] = prepare(ds, args, Path(tmp))
        for method in [m for m in methods if m not in cells]:
            twin = next((m for m in cells if m in keys and keys[m] == keys[method]
                         and cells[m].get("code") == code), None)  # fmt: skip
            load = os.getloadavg()[0]
            if twin is not None:  # the same estimator, fitted by the same code: not again
                cell = {k: v for k, v in cells[twin].items() if k != "same_as"}
                cell["same_as"] = twin
            else:
                cell = run_in_subprocess(method, Path(tmp), args.time_budget)
            cell.update(code=code, load_average=load,
                        finished=time.strftime("%Y-%m-%d %H:%M:%S"))  # fmt: skip
            cells[method] = cell
            yield method, cell


def run(args) -> int:
    """Run the selected cells, print the report; 2 if no dataset could be read."""
    import sklearn

    import scalenc

    results = read_results(args.out, protocol(args))
    code = code_version()
    methods = sorted(dict.fromkeys(args.methods), key=order_key)
    keys = {m: estimator_key(m) for m in methods}
    sets = selected(args)
    results["runs"].append({
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "code": code,
        "scalenc": scalenc.__version__, "sklearn": sklearn.__version__,
        "cores": os.cpu_count(), "load_average": os.getloadavg()[0],
    })  # fmt: skip
    print(f"# {len(sets)} datasets × {len(methods)} methods, code {code}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    missing = 0
    for ds in sets:
        entry = results["datasets"].get(ds.name, {"cells": {}})
        if all(m in entry["cells"] for m in methods):
            print(f"{ds.name}: every cell already in {args.out}", flush=True)
            continue
        try:
            for method, cell in run_dataset(ds, entry, methods, keys, code, args):
                results["datasets"][ds.name] = entry
                write_results(args.out, results)
                print(f"  {ds.name} · {method}: {cell_line(cell)}", flush=True)
        except DataMissing as exc:
            print(f"{ds.name}: skipped: {exc}", flush=True)
            missing += 1
    write_results(args.out, results)
    print("\n" + page(results))
    return 2 if sets and missing == len(sets) else 0


def cell_line(cell: dict) -> str:
    if "failed" in cell:
        return cell["failed"].splitlines()[0][:200]
    return (
        f"{cell['error_pct']:.2f} % error, fit {cell['fit_s']:.1f} s, predict "
        f"{cell['predict_s']:.1f} s, {cell['peak_mb']} MB"
        + (f" (same as {cell['same_as']})" if "same_as" in cell else "")
    )


def mean_over_splits(runs: list[dict]) -> dict:
    """One results dict from runs of different ``--split-seed``: each cell that every run
    has, with its mean test error (fit seconds and peak memory their maxima), and the
    seeds in the protocol (the first run's time budget). One run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    seeds = [r["protocol"]["split"].rsplit("seed ", 1)[-1] for r in runs]
    proto = dict(first["protocol"], split=first["protocol"]["split"].rsplit("seed ", 1)[0]
                 + f"seeds {', '.join(seeds)}, each cell's mean error")  # fmt: skip

    def fixed(protocol):  # what must match: a budget only decides cells that ran out
        return {k: v for k, v in protocol.items() if k not in ("split", "time_budget_s")}

    for other in runs[1:]:
        if fixed(other["protocol"]) != fixed(proto):
            raise SystemExit(f"error: runs of different protocols: {proto} and {other['protocol']}")
    datasets = {}
    for name, entry in first["datasets"].items():
        cells = {}
        for method, cell in entry["cells"].items():
            found = [r["datasets"].get(name, {}).get("cells", {}).get(method) for r in runs]
            if any(c is None or "error_pct" not in c for c in found):
                continue
            cells[method] = dict(
                cell,
                error_pct=float(np.mean([c["error_pct"] for c in found])),
                fit_s=max(c["fit_s"] for c in found),
                peak_mb=max(c["peak_mb"] for c in found),
                splits=len(found),
            )
        datasets[name] = dict(entry, cells=cells)
    return {"protocol": proto, "runs": [x for r in runs for x in r.get("runs", [])],
            "datasets": datasets}  # fmt: skip


def page(results: dict) -> str:
    """The markdown report of ``results`` (``defaults_report.report``)."""
    methods = sorted({m for d in results["datasets"].values() for m in d["cells"]}, key=order_key)
    scalenc = [m for m in methods if parse_method(m)[0] in SCALENC]
    peers = [m for m in methods if parse_method(m)[0] in PEERS]
    return report(results, halves(), {m: label(m) for m in methods}, scalenc, peers)


# --- the PMLB list, written once ------------------------------------------------------------


def list_pmlb(repo: Path, commit: str = PMLB_COMMIT) -> str:
    """``PMLB_SETS`` as Python, from PMLB's own metadata at ``commit``: every set whose
    ``metadata.yaml`` says ``task: classification`` and whose ``summary_stats.csv`` counts
    MIN_ROWS to MAX_ROWS rows, less those of ``PMLB_EXCLUDED``'s two rules."""
    listing = git_show(repo, commit, "datasets/").decode().split("\n")
    names = sorted(n.rstrip("/") for n in listing[2:] if n.endswith("/"))
    lines, digests = [], {}
    for name in names:
        try:
            meta = git_show(repo, commit, f"datasets/{name}/metadata.yaml").decode()
            stats = git_show(repo, commit, f"datasets/{name}/summary_stats.csv").decode()
        except DataMissing:
            continue
        task = re.search(r"^task:\s*(\w+)", meta, re.MULTILINE)
        rows = int(stats.splitlines()[1].split(",")[1])
        if task is None or task.group(1) != "classification" or not MIN_ROWS <= rows <= MAX_ROWS:
            continue
        features = int(stats.splitlines()[1].split(",")[2])
        if (name, rows, features) in {(n, r, p) for n, r, p, *_ in PAPER_SETS}:
            lines.append(f"    # {name} ({rows} rows): {PMLB_EXCLUDED[name]}")
            continue
        X, y = read_pmlb(name, repo, commit)
        table = np.column_stack([X, y])
        digest = hashlib.sha256(table[np.lexsort(table.T[::-1])].tobytes()).hexdigest()
        if digest in digests:
            lines.append(f"    # {name} ({rows} rows): the same rows as {digests[digest]}")
            continue
        digests[digest] = name
        lines.append(f'    ("{name}", {y.size}, {X.shape[1]}, {np.unique(y).size}),')
    return "PMLB_SETS = (\n" + "\n".join(lines) + "\n)"


def print_list() -> None:
    half = halves()
    print("| dataset | rows | features | classes | source | split | half |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- |")
    for d in datasets():
        print(f"| {d.name} | {d.rows:,} | {d.features} | {d.classes} | {d.source} | "
              f"{d.split} | {half[d.name]} |")  # fmt: skip


# --- main -----------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pmlb", type=Path, default=os.environ.get("SCALENC_PMLB_DIR"),
                        help=f"a clone or mirror of {PMLB_URL}: its files are read at "
                        f"{PMLB_COMMIT[:10]} with git (default $SCALENC_PMLB_DIR)")  # fmt: skip
    parser.add_argument("--papers-dir", type=Path, default=Path(os.environ.get(
                        "SCALENC_DATA_DIR", Path.cwd().parent / "shared" / "data")),
                        help="the papers' .npz files (default $SCALENC_DATA_DIR, "
                        "else ../shared/data)")  # fmt: skip
    parser.add_argument("--cache-dir", type=Path, default=Path(os.environ.get(
                        "SCALENC_BENCH_CACHE", Path.home() / ".cache" / "scalenc-defaults")),
                        help="the datasets as .npz once read (default $SCALENC_BENCH_CACHE, "
                        "else ~/.cache/scalenc-defaults)")  # fmt: skip
    parser.add_argument("--half", choices=("tune", "report", "shaped", "all"), default="all")
    parser.add_argument("--datasets", help="comma list of names (instead of --half)")
    parser.add_argument("--min-rows", type=int, default=0, help="only datasets this large")
    parser.add_argument("--max-rows", type=int, default=MAX_ROWS,
                        help="only datasets this small (a selection, not a cap)")  # fmt: skip
    parser.add_argument("--methods", default=",".join(DEFAULTS),
                        help=f"comma list among {', '.join(METHODS)}, each with parameters "
                        "set in brackets if you like (nrbfn[alpha=1e-9]), or 'all' "
                        f"(default: {','.join(DEFAULTS)})")  # fmt: skip
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds for one cell's process (default 600; --quick 120)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{', '.join(QUICK_SETS)} subsampled to --quick-rows rows",
    )
    parser.add_argument("--quick-rows", type=int, default=2000)
    parser.add_argument("--split-seed", type=int, default=SPLIT_SEED,
                        help=f"the 70/30 split's seed (default {SPLIT_SEED}, the tables'; "
                        "standard splits stay): other seeds measure a split's noise")  # fmt: skip
    parser.add_argument("--out", type=Path, help="results JSON: written per cell, resumed")
    parser.add_argument("--report", type=Path, nargs="+",
                        help="print the markdown of a results JSON; of several (one per "
                        "--split-seed), each cell's mean error over them")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="print the datasets and halves")
    parser.add_argument("--list-pmlb", type=Path, metavar="DIR",
                        help="print PMLB_SETS from a PMLB clone's metadata")  # fmt: skip
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--cell-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.methods = METHODS if args.methods == "all" else split_methods(args.methods)
    for m in args.methods:
        try:
            parse_method(m)
        except (ValueError, SyntaxError) as exc:
            parser.error(str(exc))
    if args.datasets:
        args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
        names = {d.name for d in datasets()}
        for d in args.datasets:
            if d not in names:
                parser.error(f"unknown dataset {d!r}; --list prints the {len(names)} names")
    if args.time_budget is None:
        args.time_budget = 120.0 if args.quick else 600.0
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cell:
        result = run_cell(args.cell, args.cell_dir)
        (args.cell_dir / "result.json").write_text(json.dumps(plain(result)))
        return 0
    if args.list_pmlb:
        print(list_pmlb(args.list_pmlb))
        return 0
    if args.list:
        print_list()
        return 0
    if args.report:
        print(page(mean_over_splits([json.loads(p.read_text()) for p in args.report])))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
