"""The encoder paper's six simulations (Shen, Section 5.1), generated block by block.

Rows are generated in fixed tiles of :data:`TILE` rows, each from its own seed
``(random_state, tile)``, so the same ``(n, p, random_state)`` gives the same data for
any chunking and any scheduler, and no block ever needs the others.

==========================  ======================================================
setting                     X given Y = y (y = 0..K-1 here; the paper's 1..K)
==========================  ======================================================
``uniform``                 X_y ~ U(1, 3), X_i ~ U(0, 1) for i ≠ y
``uniform_noise``           as above, then X_i += 0.5 U(0, 1) for every i
``uniform_transformed``     as ``uniform_noise``, then X = X Q, Q_ij ~ U(0, 1) (p×p)
``normal``                  X_y ~ N(8, 1), X_i ~ N(1, 1) for i ≠ y
``normal_noise``            as above, then X_i += 2 U(0, 1) for every i
``normal_transformed``      as ``normal_noise``, then X = X Q
==========================  ======================================================

Y is uniform on the K classes. The Bayes error of every setting is 0.

Examples
--------
>>> from scalenc.simulate import SETTINGS, simulate
>>> SETTINGS[:3]
('uniform', 'uniform_noise', 'uniform_transformed')
>>> X, y = simulate("uniform", n=10, n_features=4, n_classes=2, random_state=1)
>>> X.shape, sorted(set(y.compute().tolist())) == [0, 1]
((10, 4), True)
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from scalenc.exceptions import InputError

__all__ = ["SETTINGS", "TILE", "simulate", "simulate_rows"]


TILE = 1024
SETTINGS = (
    "uniform",
    "uniform_noise",
    "uniform_transformed",
    "normal",
    "normal_noise",
    "normal_transformed",
)


def _tile(setting: str, tile: int, n_features: int, n_classes: int, seed: int):
    rng = np.random.default_rng([seed, tile])
    y = rng.integers(0, n_classes, TILE)
    rows = np.arange(TILE)
    if setting.startswith("uniform"):
        X = rng.uniform(0.0, 1.0, size=(TILE, n_features))
        X[rows, y] = rng.uniform(1.0, 3.0, size=TILE)
        noise = 0.5
    else:
        X = rng.normal(1.0, 1.0, size=(TILE, n_features))
        X[rows, y] = rng.normal(8.0, 1.0, size=TILE)
        noise = 2.0
    if setting.endswith(("noise", "transformed")):
        X += noise * rng.uniform(0.0, 1.0, size=(TILE, n_features))
    return X, y


def transform_matrix(n_features: int, seed: int) -> np.ndarray:
    """The random Q (p×p, entries U(0, 1)) of the transformed settings.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.simulate import simulate_rows, transform_matrix
    >>> Q = transform_matrix(3, seed=0)
    >>> Q.shape, bool(((Q >= 0) & (Q < 1)).all())
    ((3, 3), True)

    A ``*_transformed`` setting is its ``*_noise`` setting times Q:

    >>> X_noise, _ = simulate_rows("uniform_noise", 0, 5, n_features=3, n_classes=2, seed=0)
    >>> X, _ = simulate_rows("uniform_transformed", 0, 5, n_features=3, n_classes=2, seed=0)
    >>> bool(np.allclose(X, X_noise @ Q))
    True
    """
    return np.random.default_rng([seed, 2**31]).uniform(0.0, 1.0, size=(n_features, n_features))


def simulate_rows(
    setting: str,
    start: int,
    stop: int,
    n_features: int,
    n_classes: int,
    seed: int,
    Q: np.ndarray | None = None,
    dtype=np.float64,
):
    """Rows ``start:stop`` of a simulation as NumPy arrays ``(X, y)``.

    The same rows as ``simulate(setting, n, n_features, n_classes,
    random_state=seed)[start:stop]`` for any n ≥ stop, without building the others (but
    those of the same :data:`TILE`-row tiles). ``Q`` is the transform of the
    ``*_transformed`` settings (:func:`transform_matrix`), computed when not given.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.simulate import simulate, simulate_rows
    >>> X, y = simulate_rows("uniform", 100, 110, n_features=6, n_classes=3, seed=0)
    >>> X.shape, y.shape, X.dtype
    ((10, 6), (10,), dtype('float64'))
    >>> Xd, yd = simulate("uniform", 200, 6, 3, random_state=0, dtype=np.float64)
    >>> bool(np.array_equal(Xd[100:110].compute(), X))
    True
    """
    first, last = start // TILE, (stop - 1) // TILE
    parts = [_tile(setting, t, n_features, n_classes, seed) for t in range(first, last + 1)]
    X = np.concatenate([p[0] for p in parts])[start - first * TILE : stop - first * TILE]
    y = np.concatenate([p[1] for p in parts])[start - first * TILE : stop - first * TILE]
    if setting.endswith("transformed"):
        X = X @ (Q if Q is not None else transform_matrix(n_features, seed))
    return X.astype(dtype, copy=False), y


def _x_block(setting, start, stop, p, K, seed, Q, dtype):
    return simulate_rows(setting, start, stop, p, K, seed, Q, dtype)[0]


def simulate(
    setting: str,
    n: int,
    n_features: int = 5000,
    n_classes: int = 5,
    *,
    random_state: int = 0,
    chunk_rows: int | None = None,
    dtype=np.float32,
) -> tuple[da.Array, da.Array]:
    """A simulation as lazy Dask arrays ``(X, y)``, generated block by block.

    Nothing is generated until the arrays are computed or written; each block is made by
    the task that needs it, so a simulation larger than memory streams straight into a fit
    or to a Zarr store (``scalenc make-data``).

    Parameters
    ----------
    setting : str
        One of :data:`SETTINGS` (see the module's table).
    n : int
        Rows.
    n_features : int, default=5000
        p, at least ``n_classes`` (the paper uses p = 5000).
    n_classes : int, default=5
        K ≥ 2 (the paper uses K = 5).
    random_state : int, default=0
        The seed. The same ``(setting, n, n_features, n_classes, random_state)`` gives the
        same rows for any ``chunk_rows`` and any scheduler.
    chunk_rows : int, optional
        Rows per block (default: about 64 MB blocks).
    dtype : {float32, float64}, default=float32

    Returns
    -------
    X : dask.array.Array of shape (n, n_features)
    y : dask.array.Array of shape (n,)
        Class labels 0..K-1 (int64), uniform on the K classes.

    See Also
    --------
    simulate_rows : the same rows, as NumPy arrays, for a range of rows.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc import EncoderClassifier
    >>> from scalenc.simulate import simulate
    >>> X, y = simulate("normal_noise", n=2000, n_features=20, n_classes=4, chunk_rows=500)
    >>> X
    dask.array<concatenate, shape=(2000, 20), dtype=float32, chunksize=(500, 20), ...>
    >>> X2, _ = simulate("normal_noise", n=2000, n_features=20, n_classes=4, chunk_rows=300)
    >>> bool(np.array_equal(X.compute(), X2.compute()))  # the same data for any chunking
    True
    >>> model = EncoderClassifier().fit(X[:1500], y[:1500])
    >>> float(model.score(X[1500:], y[1500:]))
    1.0
    """
    if setting not in SETTINGS:
        raise InputError(f"Unknown simulation {setting!r}; choose one of {list(SETTINGS)}.")
    if n < 1 or n_features < n_classes or n_classes < 2:
        raise InputError(
            f"A simulation needs n ≥ 1, K ≥ 2 and p ≥ K; got n={n}, p={n_features}, K={n_classes}."
        )
    itemsize = np.dtype(dtype).itemsize
    rows = chunk_rows or max(1, (64 * 2**20) // (n_features * itemsize))
    bounds = list(range(0, n, rows)) + [n]
    Q = None
    if setting.endswith("transformed"):
        Q = dask.delayed(transform_matrix)(n_features, random_state)
    x_block, y_block = dask.delayed(_x_block, pure=True), dask.delayed(_labels_block, pure=True)
    x_blocks, y_blocks = [], []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        x = x_block(setting, start, stop, n_features, n_classes, random_state, Q, np.dtype(dtype))
        x_blocks.append(da.from_delayed(x, shape=(stop - start, n_features), dtype=dtype))
        y = y_block(start, stop, n_classes, random_state)
        y_blocks.append(da.from_delayed(y, shape=(stop - start,), dtype=np.int64))
    return da.concatenate(x_blocks), da.concatenate(y_blocks)


def _labels_block(start, stop, n_classes, seed):
    """The labels of rows start:stop without generating X (same draws as :func:`_tile`)."""
    first, last = start // TILE, (stop - 1) // TILE
    ys = [
        np.random.default_rng([seed, t]).integers(0, n_classes, TILE)
        for t in range(first, last + 1)
    ]
    return np.concatenate(ys)[start - first * TILE : stop - first * TILE]
