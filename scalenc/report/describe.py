"""What a report or a summary says about its model and data: values made JSON-safe
(:func:`jsonable`), the small fitted facts of any scalenc estimator
(:func:`describe_model`), and one line naming the data (:func:`describe_data`: its path
or URL as given, credentials left out, or the kind of in-memory array with its shape).
"""

from __future__ import annotations

import math
import os
from urllib.parse import urlsplit, urlunsplit

import numpy as np

__all__ = [
    "jsonable",
    "describe_model",
    "describe_data",
    "safe_location",
]


def jsonable(value, *, max_items: int = 50):
    """A JSON value for small results: NaN → None, arrays ≤ ``max_items`` → lists.

    Larger arrays become their shape and dtype, longer lists their length, and other
    objects their ``repr`` (up to 80 characters).

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.report import jsonable
    >>> jsonable({"alpha": np.float32(0.5), "classes": np.arange(3), "risk": float("nan")})
    {'alpha': 0.5, 'classes': [0, 1, 2], 'risk': None}
    >>> jsonable(np.zeros((100, 2)))
    {'shape': [100, 2], 'dtype': 'float64'}
    """
    if isinstance(value, np.ndarray):
        if value.size > max_items:
            return {"shape": list(value.shape), "dtype": str(value.dtype)}
        return [jsonable(v) for v in value.tolist()] if value.ndim else jsonable(value.item())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) > max_items:
            return {"length": len(value)}
        return [jsonable(v) for v in value]
    text = repr(value)
    return text if len(text) <= 80 else f"<{type(value).__name__}>"


def describe_model(est) -> dict:
    """The small public fitted attributes of an estimator, JSON-ready (arrays summarised).

    The encoder's ``cross_entropy_`` (with ``cross_entropy_kind_`` and
    ``cross_entropy_bounds_``) is keyed by kernel and kept as the paper's sum c_m over
    the labeled training rows; ``cross_entropy_per_row`` adds c_m divided by those rows
    (``cross_entropy_rows``, the sum of ``class_counts_``), comparable across data sizes
    and with log K, the cross-entropy of guessing.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LRClassifier().fit(X, y)
    >>> from scalenc.report import describe_model
    >>> facts = describe_model(model)
    >>> facts["estimator"], facts["classes_"], facts["n_passes_"]
    ('LRClassifier', [0, 1, 2], 1)
    """
    out = {"estimator": type(est).__name__}
    for key, value in sorted(vars(est).items()):
        if not key.endswith("_") or key.startswith("_"):
            continue
        if type(value).__module__.startswith("scalenc.") and hasattr(value, "get_params"):
            out[key] = describe_model(value)
        else:  # arrays and lists of more than 20 items summarised
            out[key] = jsonable(value, max_items=20)
    if "kernels_" in out and hasattr(est, "cross_entropy_"):
        # with a graph, the candidates are the embeddings compared, by name
        names = getattr(est, "embeddings_", None) or [repr(k) for k in est.kernels_]
        for key in ("cross_entropy_", "cross_entropy_kind_", "cross_entropy_bounds_"):
            if hasattr(est, key):  # older model files hold no kind or bounds
                out[key] = {k: jsonable(c) for k, c in zip(names, getattr(est, key))}
        rows = int(np.sum(getattr(est, "class_counts_", 0)))
        out["cross_entropy_rows"] = rows
        out["cross_entropy_per_row"] = {
            k: jsonable(c / rows) if rows else None for k, c in zip(names, est.cross_entropy_)
        }
    return out


def safe_location(path) -> str:
    """A path or URL as given, less what may be a secret: a URL's user and password, its
    query (signed URLs carry their token there) and its fragment. Text after the first
    space (a description's shape) is kept; applied twice, it changes nothing more.

    Examples
    --------
    >>> from scalenc.report.describe import safe_location
    >>> safe_location("s3://key:secret@bucket/model?X-Amz-Signature=abc#top")
    's3://***@bucket/model?***'
    >>> safe_location("/data/train.zarr (1000 rows × 20 features)")
    '/data/train.zarr (1000 rows × 20 features)'
    """
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    head, space, rest = text.partition(" ")
    if "://" not in head:
        return text
    return _url(head) + space + rest


def _url(text: str) -> str:
    try:
        parts = urlsplit(text)
        host = parts.netloc.rpartition("@")[2]
        netloc = f"***@{host}" if "@" in parts.netloc else parts.netloc
        query = "***" if parts.query else ""
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return text.partition("://")[0] + "://***"


def _plural(count, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def describe_data(X, source=None) -> str:
    """One line naming the data a report is about.

    Parameters
    ----------
    X : array-like or None
        The data: NumPy, Dask, pandas, or anything with ``shape``.
    source : str or path-like, optional
        Where it was read from, as the user gave it. A URL is shown without its user,
        password, query and fragment; storage options are never passed here.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc.report import describe_data
    >>> describe_data(np.zeros((1000, 20)))
    'NumPy array 1000 × 20'
    >>> describe_data(da.zeros((1000, 20), chunks=(250, 20)))
    'Dask array 1000 × 20 (4 row blocks)'
    >>> describe_data(da.zeros((600, 5), chunks=(600, 5)), "s3://key:secret@bucket/d.zarr?x=1")
    's3://***@bucket/d.zarr?*** (600 rows × 5 features, 1 row block)'
    """
    shape = tuple(getattr(X, "shape", ()) or ())
    rows = shape[0] if shape and isinstance(shape[0], (int, np.integer)) else "?"
    features = shape[1] if len(shape) > 1 else 1
    chunks = getattr(X, "chunks", None)
    blocks = len(chunks[0]) if isinstance(chunks, tuple) and chunks else None
    if source is not None:
        size = f"{rows} rows × {_plural(features, 'feature')}" if shape else ""
        size += f", {_plural(blocks, 'row block')}" if blocks and size else ""
        return f"{safe_location(source)} ({size})" if size else safe_location(source)
    module = type(X).__module__.partition(".")[0]
    kinds = {
        "numpy": "NumPy",
        "dask": "Dask",
        "dask_expr": "Dask",
        "pandas": "pandas",
        "zarr": "Zarr",
    }
    name = {"ndarray": "array", "Array": "array"}.get(type(X).__name__, type(X).__name__)
    kind = f"{kinds.get(module, module)} {name}"
    if not shape:
        return kind
    text = f"{kind} {rows} × {features}"
    return text + (f" ({_plural(blocks, 'row block')})" if blocks else "")
