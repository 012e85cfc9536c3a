"""A fitted estimator as a tree of plain JSON values with its arrays beside it, and back,
building only the types of :data:`scalenc.persist.types.ALLOWED_TYPES`.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import scipy.sparse as sp

from scalenc.encoder.kernels import KERNELS, CallableKernel
from scalenc.exceptions import ModelFileError
from scalenc.persist.types import ALLOWED_TYPES, allowed_class, type_name

ARRAY_DIR = "arrays"
_JSON_SCALARS = (str, bool, int, float, type(None))


class Writer:
    """Turns a fitted estimator into a JSON tree, collecting arrays to write as .npy."""

    def __init__(self):
        self.arrays: list[tuple[str, np.ndarray]] = []

    def encode(self, value, where: str):
        if isinstance(value, np.ndarray):
            return self._array(value, where)
        if isinstance(value, np.generic):
            return {"__scalar__": value.dtype.str, "value": self._float(value.item())}
        if isinstance(value, np.dtype):
            return {"__dtype__": value.str}
        if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
            return value
        if isinstance(value, float):
            return self._float(value)
        if isinstance(value, (list, tuple)):
            items = [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return items if isinstance(value, list) else {"__tuple__": items}
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise self._refuse(where, value, "a dict with non-string keys")
            return {"__dict__": {k: self.encode(v, f"{where}.{k}") for k, v in value.items()}}
        if type(value).__module__.startswith("scipy.sparse") and sp.issparse(value):
            csr = value.tocsr()
            return {
                "__csr__": "array" if isinstance(value, sp.sparray) else "matrix",
                "shape": list(csr.shape),
                "data": self._array(csr.data, f"{where}.data"),
                "indices": self._array(csr.indices, f"{where}.indices"),
                "indptr": self._array(csr.indptr, f"{where}.indptr"),
            }
        name = type_name(type(value))
        kind = ALLOWED_TYPES.get(name)
        if kind == "object":
            fields = {k: self.encode(v, f"{where}.{k}") for k, v in vars(value).items()}
            return {"__object__": name, "attributes": fields}
        if kind == "estimator":
            return self.estimator(value, where)
        if kind == "dataclass":
            fields = {
                f.name: self.encode(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value)
            }
            return {"__type__": name, "fields": fields}
        raise self._refuse(where, value)

    def estimator(self, est, where: str) -> dict:
        params = est.get_params(deep=False)
        state = {k: v for k, v in vars(est).items() if k not in params}
        if hasattr(est, "_saved_state"):  # what the estimator keeps lazily, as arrays
            state = est._saved_state(state)
        return {
            "__estimator__": type_name(type(est)),
            "params": {k: self.encode(v, f"{where}.{k}") for k, v in params.items()},
            "state": {k: self.encode(v, f"{where}.{k}") for k, v in sorted(state.items())},
        }

    def plain_list(self, values) -> list:
        """A small array as a JSON list (for the human-readable part of model.json)."""
        return [self._float(v) for v in np.asarray(values).tolist()]

    @staticmethod
    def _float(value):
        if isinstance(value, float) and not math.isfinite(value):
            return {"__float__": repr(value)}  # 'nan', 'inf', '-inf'
        return value

    def _array(self, arr: np.ndarray, where: str):
        if arr.dtype.kind == "O":
            items = arr.ravel().tolist()
            if not all(isinstance(v, _JSON_SCALARS) for v in items):
                raise self._refuse(where, arr, "an object array of non-scalar values")
            return {"__object_array__": [self._float(v) for v in items], "shape": list(arr.shape)}
        if arr.dtype.hasobject or arr.dtype.kind == "V":
            raise self._refuse(where, arr, f"an array of dtype {arr.dtype}")
        index = len(self.arrays)
        local = where.split(".", 1)[1] if "." in where else where  # drop the root's class name
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", local)[:80]
        rel = f"{ARRAY_DIR}/{index:03d}-{safe}.npy"
        self.arrays.append((rel, np.ascontiguousarray(arr)))
        return {"__array__": rel}

    @staticmethod
    def _refuse(where: str, value, what: str | None = None) -> ModelFileError:
        what = what or f"a {type(value).__module__}.{type(value).__qualname__}"
        hint = ""
        if isinstance(value, CallableKernel) or callable(value):
            hint = (
                " A model with a user callable kernel cannot be saved as a safe model file "
                "(loading it would have to run code); use a named kernel "
                f"{sorted(KERNELS)}, or pickle/joblib the estimator instead."
            )
        elif type(value).__module__.startswith("dask"):
            hint = (
                " It refers to data (a Dask collection) rather than holding fitted numbers; "
                "EncoderClassifier(method='full') keeps the training X for predict and cannot "
                "be saved — use method='fast'."
            )
        return ModelFileError(
            f"Cannot save {where}: it is {what}, which a scalenc model file cannot hold.{hint}"
        )


class Reader:
    """Rebuilds the JSON tree, allowing only the types of :data:`ALLOWED_TYPES`."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays

    def decode(self, node, where: str):
        if isinstance(node, (str, bool, int, float)) or node is None:
            return node
        if isinstance(node, list):
            return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, dict) or len(node) == 0:
            raise ModelFileError(f"Unreadable entry at {where}: {str(node)[:80]!r}.")
        if "__array__" in node:
            try:
                return self.arrays[node["__array__"]]
            except (KeyError, TypeError):
                raise ModelFileError(
                    f"{where} refers to array file {node['__array__']!r}, which model.json "
                    "does not list."
                ) from None
        if "__object_array__" in node:
            items = [self.decode(v, where) for v in node["__object_array__"]]
            out = np.empty(len(items), dtype=object)
            out[:] = items
            return out.reshape(node.get("shape", [len(items)]))
        if "__float__" in node:
            if node["__float__"] not in ("nan", "inf", "-inf"):
                raise ModelFileError(f"Bad float at {where}: {node['__float__']!r}.")
            return float(node["__float__"])
        if "__scalar__" in node:
            dtype = self._dtype(node["__scalar__"], where)
            return dtype.type(self.decode(node["value"], where))
        if "__dtype__" in node:
            return self._dtype(node["__dtype__"], where)
        if "__tuple__" in node:
            return tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(node["__tuple__"]))
        if "__dict__" in node:
            return {k: self.decode(v, f"{where}.{k}") for k, v in node["__dict__"].items()}
        if "__type__" in node:
            cls = allowed_class(node["__type__"], "dataclass", where)
            fields = {k: self.decode(v, f"{where}.{k}") for k, v in node["fields"].items()}
            try:
                return cls(**fields)
            except TypeError as exc:
                raise ModelFileError(
                    f"{where}: the stored fields of {node['__type__']} do not match this scalenc "
                    f"version's ({exc})."
                ) from None
        if "__estimator__" in node:
            return self.estimator(node, where)
        if "__object__" in node:
            cls = allowed_class(node["__object__"], "object", where)
            obj = cls.__new__(cls)  # no __init__: the attributes are restored as saved
            for key, value in node["attributes"].items():
                setattr(obj, key, self.decode(value, f"{where}.{key}"))
            return obj
        if "__csr__" in node:
            parts = [self.decode(node[k], f"{where}.{k}") for k in ("data", "indices", "indptr")]
            make = sp.csr_array if node["__csr__"] == "array" else sp.csr_matrix
            try:
                return make(tuple(parts), shape=tuple(node["shape"]))
            except (ValueError, TypeError) as exc:
                raise ModelFileError(f"Bad sparse matrix at {where}: {exc}.") from None
        raise ModelFileError(f"Unreadable entry at {where}: keys {sorted(node)[:5]}.")

    def estimator(self, node: dict, where: str):
        cls = allowed_class(node["__estimator__"], "estimator", where)
        params = {k: self.decode(v, f"{where}.{k}") for k, v in node["params"].items()}
        known = set(cls._get_param_names())
        unknown = sorted(set(params) - known)
        if unknown:
            raise ModelFileError(
                f"{where}: the model was saved with parameter(s) {unknown} that this scalenc's "
                f"{cls.__name__} does not have (it has {sorted(known)}). Load it with the "
                "scalenc version that saved it (see `scalenc info`)."
            )
        est = cls(**params)
        views = {}
        for key, value in node["state"].items():
            if _is_view(cls, key):  # a copy older files kept of what the class now derives
                views[key] = self.decode(value, f"{where}.{key}")
                continue
            setattr(est, key, self.decode(value, f"{where}.{key}"))
        for key, value in views.items():
            if not _same(getattr(est, key, None), value):
                raise ModelFileError(
                    f"{where}.{key}: the model file's copy disagrees with the value "
                    f"{cls.__name__} derives from the rest of the model; the file is damaged."
                )
        return est

    @staticmethod
    def _dtype(text, where) -> np.dtype:
        try:
            dtype = np.dtype(text)
        except TypeError:
            raise ModelFileError(f"Bad dtype at {where}: {text!r}.") from None
        if dtype.hasobject:
            raise ModelFileError(f"Object dtype at {where} is not allowed in a model file.")
        return dtype


def _is_view(cls, name: str) -> bool:
    """Whether ``name`` is a read-only property of ``cls`` (a fitted attribute it derives,
    such as CCDRClassifier's views of its CCDR's), which a model file need not set."""
    attr = getattr(cls, name, None)
    return isinstance(attr, property) and attr.fset is None


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc"))
