"""Golden outputs of ``NRBFNClassifier()`` (issue 53): what a refactor of nRBFN's search
must leave unchanged, recorded once from main and compared after every step.

Each set is fitted with the defaults (``np.random.seed(0)`` before the fit, so that
``random_state=None`` draws the same seed) and records: the test rows' predictions,
``alpha_``, the basis (its size and a digest of ``basis_indices_``), ``sigma_``,
``normalize_``, ``cv_error_`` and ``basis_growth_``; ``weights_`` and ``n_passes_`` are
recorded for information (a new default may change the passes; the weights' last bits
may change with the order of a solve's operations, the predictions may not).

Sets (all under a minute each on two shared cores):

* ``iris-all``, ``digits-all``: scikit-learn's tables, fitted and predicted on every row
  (the first fit a user tries);
* the papers' sets of ``$SCALENC_DATA_DIR`` (iris, wine, wdbc, sonar, glass, yale32,
  orl32, satimage, usps): the standard split where the set has one, else stratified
  70 / 30 with seed 0; features mapped to [-1, 1] by the training rows' range (the
  protocol of ``benchmarks/defaults.py``);
* ``gauss-200x5``: 200 Gaussian classes of 5 rows in 8 features (centres × 3, unit noise,
  seed 0), a smaller copy of the issue's 1 000 × 5; ``gauss-20x100``: 20 classes of 100;
  ``shell-2400``: ringnorm's two Gaussians, N(0, 4 I) and N(2/√p, I) in 10 features
  (2 400 training rows, seed 0; 1 200 test rows, seed 1), where the plain kernel W wins
  and the paper's W̃ is tried again.

Usage::

    python benchmarks/nrbfn_golden.py --record benchmarks/nrbfn_golden.json
    python benchmarks/nrbfn_golden.py --compare benchmarks/nrbfn_golden.json [--sets iris-all ...]

``--model DIR`` with ``--record`` saves the ``iris-all`` model (``scalenc.save_model``);
with ``--compare`` it loads that file and checks that it predicts as recorded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

SETS = (
    "iris-all",
    "digits-all",
    "iris",
    "wine",
    "wdbc",
    "sonar",
    "glass",
    "yale32",
    "orl32",
    "gauss-200x5",
    "gauss-20x100",
    "shell-2400",
    "satimage",
    "usps",
)


def _scaled_split(X, y, train=None, test=None):
    from sklearn.model_selection import train_test_split

    if train is None:
        train, test = train_test_split(np.arange(y.size), test_size=0.3, stratify=y, random_state=0)
        train, test = np.sort(train), np.sort(test)
    lo, hi = X[train].min(axis=0), X[train].max(axis=0)
    constant = hi == lo
    span = np.where(constant, 1.0, hi - lo)

    def apply(A):
        return np.where(constant, 0.0, 2.0 * (A - lo) / span - 1.0)

    return apply(X[train]), y[train], apply(X[test]), y[test]


def load(name: str):
    """(X_train, y_train, X_test, y_test) of a golden set, float64."""
    if name in ("iris-all", "digits-all"):
        from sklearn.datasets import load_digits, load_iris

        X, y = (load_iris if name == "iris-all" else load_digits)(return_X_y=True)
        return X, y, X, y
    if name == "shell-2400":
        return (*_shell(2400, 0), *_shell(1200, 1))
    if name.startswith("gauss-"):
        K, m = (int(v) for v in name[len("gauss-") :].split("x"))
        rng = np.random.default_rng(0)
        centres = 3.0 * rng.standard_normal((K, 8))
        y = np.repeat(np.arange(K), m)
        X = centres[y] + rng.standard_normal((y.size, 8))
        return _scaled_split(X, y)
    data = np.load(Path(os.environ.get("SCALENC_DATA_DIR", "../shared/data")) / f"{name}.npz")
    X, y = data["X"].astype(np.float64), data["y"]
    if "train_idx" in data:
        return _scaled_split(X, y, data["train_idx"], data["test_idx"])
    return _scaled_split(X, y)


def _shell(n: int, seed: int):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = np.where(
        y[:, None] == 0, 2.0 * rng.normal(size=(n, 10)), rng.normal(size=(n, 10)) + 2 / 10**0.5
    )
    return X, y


def _digest(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def _plain(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    a = np.asarray(value)
    return a.tolist() if a.ndim else a.item()


def outputs(model, X_test) -> dict:
    """What the golden file keeps of a fitted model."""
    return {
        "predictions": np.asarray(model.predict(X_test)).tolist(),
        "alpha": float(model.alpha_),
        "r": int(model.basis_.shape[0]),
        "basis_indices": _digest(np.asarray(model.basis_indices_, dtype=np.int64)),
        "sigma": float(model.sigma_),
        "normalize": bool(model.normalize_),
        "cv_error": _plain(model.cv_error_),
        "basis_growth": _plain(model.basis_growth_),
        "weights_sum_abs": float(np.abs(model.weights_).sum()),
        "n_passes": int(model.n_passes_),
    }


def fit(name: str):
    from scalenc import NRBFNClassifier

    X, y, Xt, yt = load(name)
    np.random.seed(0)  # noqa: NPY002 - the global state random_state=None draws from
    start = time.perf_counter()
    model = NRBFNClassifier().fit(X, y)
    seconds = time.perf_counter() - start
    out = outputs(model, Xt)
    out["seconds"] = round(seconds, 3)
    out["error"] = round(float(np.mean(np.asarray(out["predictions"]) != yt)), 6)
    return model, out, Xt


def _close(a, b, rtol: float) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=0, equal_nan=True))


#: The keys compared exactly, and those compared to a relative tolerance (rounding of σ's
#: mean distance and of the held-out rates, which are counts over rows, may not move).
EXACT = ("predictions", "alpha", "r", "basis_indices", "normalize")
CLOSE = ("sigma", "cv_error")


def differences(old: dict, new: dict) -> list[str]:
    """What differs between two records of one set (empty: the same results)."""
    found = [key for key in EXACT if old[key] != new[key]]
    found += [key for key in CLOSE if not _close(old[key], new[key], 1e-12)]
    og, ng = old["basis_growth"], new["basis_growth"]
    if (og is None) != (ng is None):
        found.append("basis_growth")
    elif og is not None:
        for key in sorted(set(og) | set(ng)):
            if key not in og or key not in ng or not _close(og[key], ng[key], 1e-12):
                found.append(f"basis_growth.{key}")
    return found


def _lines(golden: dict) -> str:
    """The golden file's text: one line per set."""
    sets = [f"{json.dumps(name)}: {json.dumps(out)}" for name, out in golden.items()]
    return "{\n" + ",\n".join(sets) + "\n}\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", type=Path)
    mode.add_argument("--compare", type=Path)
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--model", type=Path)
    args = parser.parse_args(argv)
    import scalenc

    if args.record:
        golden = json.loads(args.record.read_text()) if args.record.exists() else {}
        for name in args.sets:
            model, out, _ = fit(name)
            golden[name] = out
            print(f"{name}: r={out['r']} alpha={out['alpha']:g} {out['seconds']} s", flush=True)
            if name == "iris-all" and args.model:
                scalenc.save_model(model, args.model, overwrite=True)
            args.record.write_text(_lines(golden))
        return 0
    golden = json.loads(args.compare.read_text())
    failed = 0
    for name in args.sets:
        _, out, Xt = fit(name)
        diff = differences(golden[name], out)
        failed += bool(diff)
        seconds = f"{golden[name]['seconds']} → {out['seconds']} s"
        passes = f"passes {golden[name]['n_passes']} → {out['n_passes']}"
        print(
            f"{name}: {'DIFFERS in ' + ', '.join(diff) if diff else 'same'} ({seconds}, {passes})"
        )
        if name == "iris-all" and args.model:
            loaded = scalenc.load_model(args.model)
            same = np.asarray(loaded.predict(Xt)).tolist() == golden[name]["predictions"]
            failed += not same
            print(f"model file {args.model}: {'predicts the same' if same else 'DIFFERS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
