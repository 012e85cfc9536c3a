"""The shapes and dtypes of a model file's arrays, checked against each other and against
the estimator's parameters when the model is loaded.

A model file's checksums say that its files are the ones recorded in ``model.json``; they
cannot say that the arrays make a model. A file whose arrays were edited and re-checksummed
would load and predict with, say, a ``coef_`` of the wrong shape. :func:`check_shapes`
walks the loaded estimator with the table :data:`RULES` (for each type: attribute →
expected shape in named sizes, and dtype kind) and refuses the first array that disagrees.

The sizes, by name:

``K``
    classes, ``len(classes_)`` (the CCDR paper's L).
``C``
    rows of an LDA's discriminant: K, or 1 for two classes.
``p``
    columns of X, ``n_features_in_``.
``w``
    columns of the numeric matrix the model was fitted on, :func:`fitted_width`.
``M``
    the encoder's kernels (its ``kernels`` parameter).
``E``, ``z``, ``n``
    an encoder fitted with a graph: the embeddings it compared (``embeddings_``), the
    width of the chosen one (from its options), and its training nodes.
``G``
    the λ values nRBFN's cross-validation scored (its ``alpha`` parameter).
``m``
    CCDR's embedding dimension (``n_components`` when an int, else ``n_components_``).
``d``
    the input dimension of an LDA model (K for the encoder's, m for CCDR's LDA head).
others (``r``, ``c``, ``s``, ``n``, ``B``)
    free: bound by the first array that has them, which every later one must match.

A nested object (an LDA model, a CCDR subsample's solution, a classifier head, the CCDR
inside :class:`~scalenc.ccdr.CCDRClassifier`) is checked by its own type's rules, with the
sizes its parent hands it. An attribute a file does not hold (files of older versions, a
``partial_fit`` model still waiting for a class) is not checked; attributes the table
does not name are ignored.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from scalenc.base.estimator import fitted_width as estimator_width
from scalenc.ccdr import CCDR, CCDRClassifier
from scalenc.ccdr.blocks import CCDRSolution, KNNHead, LDAHead, LinearHead
from scalenc.encoder import EncoderClassifier
from scalenc.exceptions import ModelFileError
from scalenc.io.tables import FeatureEncoder
from scalenc.math.linalg import LDAModel
from scalenc.nrbfn import LRClassifier, NRBFNClassifier
from scalenc.nrbfn.estimator import AUTO_ALPHA_GRID, DEFAULT_ALPHA_GRID

__all__ = ["RULES", "GRAPH_ENCODER", "check_shapes", "fitted_width"]

_ABSENT = object()
_KINDS = {
    "f": "a floating-point dtype",
    "iu": "an integer dtype",
    "i": "a signed integer dtype",
    "fiu": "a numeric dtype",
    "iU": "a signed integer or string dtype",
    "U": "a string dtype",
}


def fitted_width(model) -> int | None:
    """The number of columns of the numeric matrix ``model`` was fitted on (``w``):
    ``n_features_in_``, or the encoded width of a table with categorical columns
    (:func:`scalenc.base.estimator.fitted_width`); None where the model has none."""
    if getattr(model, "n_features_in_", None) is None:
        return None
    return estimator_width(model)


# --- the sizes in scope ----------------------------------------------------------------


class _Scope:
    """The sizes known at one place of the walk, each with where its value came from."""

    def __init__(self, where: str, sizes: dict[str, tuple[int, str]] | None = None):
        self.where = where
        self.sizes = dict(sizes or {})

    def child(self, shared: tuple[str, ...], renamed: dict[str, str]) -> _Scope:
        pairs = [(n, n) for n in shared] + list(renamed.items())
        return _Scope(self.where, {c: self.sizes[p] for c, p in pairs if p in self.sizes})

    def fits(self, dim, actual: int, source: str) -> bool:
        """Whether ``actual`` is the size ``dim`` ("K", "m+1", an int, None: any), binding
        a free name to it."""
        if dim is None:
            return True
        if isinstance(dim, int):
            return actual == dim
        name, _, offset = dim.partition("+")
        offset = int(offset or 0)
        if name in self.sizes:
            return actual == self.sizes[name][0] + offset
        if actual < offset:
            return False
        self.sizes[name] = (actual - offset, source)
        return True

    def show(self, dims) -> str:
        """An expected shape, its known sizes as numbers."""
        return _shape_text(self.value(d) for d in dims)

    def because(self, dims) -> str:
        """Where the known sizes among ``dims`` came from, for a message."""
        names = dict.fromkeys(d.partition("+")[0] for d in dims if isinstance(d, str))
        known = [
            f"{n} = {self.sizes[n][0]} from {self.sizes[n][1]}" for n in names if n in self.sizes
        ]
        return f" ({'; '.join(known)})" if known else ""

    def value(self, dim):
        """The size ``dim`` as a number where it is known, else as written."""
        if dim is None:
            return "*"
        if isinstance(dim, int):
            return dim
        name, _, offset = dim.partition("+")
        if name not in self.sizes:
            return dim
        return self.sizes[name][0] + int(offset or 0)

    def refuse(self, path: str, what: str) -> ModelFileError:
        return ModelFileError(
            f"{self.where}: {path} {what}. The model file was altered or damaged after it "
            "was saved (its arrays do not fit together); it is refused. Refit or restore "
            "the model."
        )


def _shape_text(dims) -> str:
    dims = tuple(dims)
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(str(d) for d in dims)})"


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _get(obj, name: str):
    if isinstance(obj, dict):
        return obj.get(name, _ABSENT)
    return getattr(obj, name, _ABSENT)


# --- the rules ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Array:
    """An ndarray (with ``sparse``, a SciPy sparse matrix) of ``shape`` (sizes by name,
    ``"m+1"``, or None: any) whose dtype kind is one of ``kinds`` (``"f"`` float, ``"iu"``
    integer; empty: any)."""

    shape: tuple
    kinds: str = ""
    nullable: bool = False  # None stands for it
    number: bool = False  # a plain number stands for it (a running total not yet started)
    sparse: bool = False

    def check(self, value, path: str, scope: _Scope) -> None:
        if value is None and self.nullable:
            return
        if self.number and isinstance(value, numbers.Real) and not isinstance(value, bool):
            return
        if not (sp.issparse(value) if self.sparse else isinstance(value, np.ndarray)):
            expected = (
                f"a sparse matrix of shape {scope.show(self.shape)}"
                if self.sparse
                else f"an array of {_expected(self, scope)}"
            )
            raise scope.refuse(path, f"is a {type(value).__name__}; expected {expected}")
        _check_shape(value.shape, value.dtype, self, path, scope)


def _check_shape(shape, dtype, rule, path: str, scope: _Scope) -> None:
    expected = rule.shape
    fits = len(shape) == len(expected)
    for axis, (dim, actual) in enumerate(zip(expected, shape)):
        fits = fits and scope.fits(dim, actual, f"{path}.shape[{axis}]")
    if fits and (not rule.kinds or dtype.kind in rule.kinds):
        return
    raise scope.refuse(
        path,
        f"has shape {_shape_text(shape)} and dtype {dtype}; expected {_expected(rule, scope)}"
        f"{scope.because(expected)}",
    )


def _expected(rule, scope: _Scope) -> str:
    """What ``rule`` expects: its shape, known sizes as numbers, and its dtype kinds."""
    shape = f"shape {scope.show(rule.shape)}"
    return f"{shape} and {_KINDS[rule.kinds]}" if rule.kinds else shape


@dataclass(frozen=True)
class Count:
    """An integer that is the size ``name`` (binding it where it is free)."""

    name: str

    def check(self, value, path: str, scope: _Scope) -> None:
        if not (_is_int(value) and value >= 0 and scope.fits(self.name, int(value), path)):
            raise scope.refuse(
                path,
                f"is {value!r}; expected {scope.value(self.name)}{scope.because((self.name,))}",
            )


@dataclass(frozen=True)
class Codes:
    """Class codes: a 1-D signed integer array of the size ``length``, each −1 (unlabeled)
    or an index below K."""

    length: str

    def check(self, value, path: str, scope: _Scope) -> None:
        Array((self.length,), "i").check(value, path, scope)
        K = scope.sizes.get("K")
        if K is not None and value.size and not (-1 <= value.min() and value.max() < K[0]):
            raise scope.refuse(
                path,
                f"holds codes from {value.min()} to {value.max()}; expected −1 … K − 1 = "
                f"{K[0] - 1} (K from {K[1]})",
            )


@dataclass(frozen=True)
class Index:
    """An integer index into something of the size ``name``."""

    name: str

    def check(self, value, path: str, scope: _Scope) -> None:
        size = scope.sizes.get(self.name)
        if size is None:
            return
        if not (_is_int(value) and 0 <= value < size[0]):
            raise scope.refuse(
                path,
                f"is {value!r}; expected an index below {self.name} = {size[0]} (from {size[1]})",
            )


@dataclass(frozen=True)
class Each:
    """A list (or tuple) of ``length`` items, each checked by ``item`` (None: any item)."""

    item: object
    length: str
    nullable: bool = False

    def check(self, value, path: str, scope: _Scope) -> None:
        if value is None and self.nullable:
            return
        if not isinstance(value, (list, tuple)):
            raise scope.refuse(path, f"is a {type(value).__name__}; expected a list")
        if not scope.fits(self.length, len(value), f"len({path})"):
            raise scope.refuse(
                path,
                f"has {len(value)} items; expected {scope.value(self.length)}"
                f"{scope.because((self.length,))}",
            )
        if self.item is not None:
            for i, item in enumerate(value):
                self.item.check(item, f"{path}[{i}]", _Scope(scope.where, scope.sizes))


@dataclass(frozen=True)
class Fields:
    """A dict whose entries are checked by ``rules``, in the same sizes."""

    rules: dict
    nullable: bool = False

    def check(self, value, path: str, scope: _Scope) -> None:
        if value is None and self.nullable:
            return
        if not isinstance(value, dict):
            raise scope.refuse(path, f"is a {type(value).__name__}; expected a dict")
        _check_attributes(value, self.rules, path, scope)


@dataclass(frozen=True, init=False)
class Nested:
    """An object checked by its own type's rules (:data:`RULES`), handed the sizes named
    in ``shared`` and ``renamed`` (its name → the parent's)."""

    shared: tuple[str, ...]
    renamed: dict[str, str]

    def __init__(self, *shared: str, **renamed: str):
        object.__setattr__(self, "shared", shared)
        object.__setattr__(self, "renamed", renamed)

    def check(self, value, path: str, scope: _Scope) -> None:
        _check_object(value, path, scope.child(self.shared, self.renamed))


@dataclass(frozen=True)
class Table:
    """The rules of one type: ``given`` the sizes its parameters and scalars fix (each a
    function of the object returning ``[(name, value, source)]``), then its attributes,
    then ``agree``: checks of values that must agree across attributes (each a function
    ``(object, path, scope)`` raising ``scope.refuse``)."""

    attributes: dict
    given: tuple[Callable, ...] = ()
    agree: tuple[Callable, ...] = ()


# --- the sizes an estimator fixes --------------------------------------------------------


# Each returns [(name, value, source)], "{}" in the source standing for the object's path.


def _classes(model):
    classes = getattr(model, "classes_", None)
    if not (isinstance(classes, np.ndarray) and classes.ndim == 1):
        return []  # classes_'s own rule says what is wrong
    K = classes.size
    return [
        ("K", K, "len({}.classes_)"),
        ("C", 1 if K == 2 else K, "len({}.classes_), or 1 for two classes"),
    ]


def _features(model):
    return [
        ("p", getattr(model, "n_features_in_", None), "{}.n_features_in_"),
        ("w", fitted_width(model), "the width {} was fitted on"),
    ]


def _kernels(model):
    kernels = getattr(model, "kernels", None)
    return [("M", len(kernels) if isinstance(kernels, (list, tuple)) else 1, "{}.kernels")]


def _graph_sizes(model):
    """An encoder fitted with a graph: the embeddings compared and the chosen one's width."""
    names = getattr(model, "embeddings_", None)
    out = [("E", len(names), "len({}.embeddings_)")] if isinstance(names, list) else []
    try:
        width = model._graph_width
    except (AttributeError, TypeError):  # classes_'s or kernel_'s own rule says what is wrong
        return out
    return out + [("z", width, "the chosen embedding of {} (its graph options)")]


def _alpha_grid(model):
    alpha = getattr(model, "alpha", None)
    if isinstance(alpha, str):
        n = {"cv": len(DEFAULT_ALPHA_GRID), "auto": len(AUTO_ALPHA_GRID)}.get(alpha)
    else:
        n = len(alpha) if isinstance(alpha, (list, tuple)) else 1
    return [("G", n, "the λ grid of {}.alpha")]


def _encoder_sizes(encoder):
    """A table's columns (p, as the estimator's n_features_in_), numeric and categorical."""
    out = []
    for name, attribute in (("p", "columns"), ("q", "numeric"), ("g", "categorical")):
        value = getattr(encoder, attribute, None)
        if isinstance(value, list):
            out.append((name, len(value), f"len({{}}.{attribute})"))
    return out


def _components(model):
    m = getattr(model, "n_components", None)
    return [("m", m, "{}.n_components")] if _is_int(m) else []


# --- the table ---------------------------------------------------------------------------

_F, _I = "f", "iu"
_CLASSES = {
    "classes_": Array(("K",)),
    "feature_names_in_": Array(("p",)),
    "feature_encoder_": Nested("p"),  # None (nothing encoded) has no rules
}
_MOMENTS = {"n": Array(("K",), "fiu"), "mean": Array(("K", "w"), _F)}


def _codes_counted(model, path: str, scope: _Scope) -> None:
    """The training nodes' class codes hold as many nodes of each class as
    ``class_counts_`` says: codes cut short (and the checksums recomputed) would predict
    from a smaller graph than the one fitted, and blame the edges at predict."""
    codes, counts = model._graph_codes, getattr(model, "class_counts_", None)
    if counts is None:
        return
    found = np.bincount(codes[codes >= 0], minlength=counts.size)  # codes < K: checked
    if not np.array_equal(found, counts):
        k = int(np.flatnonzero(found != counts)[0])
        raise scope.refuse(
            f"{path}._graph_codes",
            f"holds {found[k]} node(s) of class code {k} among its {codes.size} nodes; "
            f"{path}.class_counts_ says the fit had {counts[k]:g}",
        )


#: An EncoderClassifier fitted with a graph (a model file of schema version 2): its
#: candidates are the embeddings compared (E of them, each of its own width: K, 2K
#: directed, or both beside each other), the feature kernels (F, none for the graph
#: alone) and the training nodes' class codes (n).
GRAPH_ENCODER = Table(
    agree=(_codes_counted,),
    given=(_classes, _features, _graph_sizes),
    attributes={
        **_CLASSES,
        "class_counts_": Array(("K",), "fiu"),
        "class_means_": Array(("K", "w"), _F),
        "kernels_": Each(None, "F"),
        "_kernel_specs": Each(None, "F"),
        "embeddings_": Each(None, "E"),
        "kernel_index_": Index("E"),
        "lda_models_": Each(Nested("K", "C"), "E"),  # d: each candidate's own width
        "coef_": Array(("C", "z"), _F),
        "intercept_": Array(("C",), _F),
        "embedding_means_": Array(("K", "z"), _F),
        "cross_entropy_": Array(("E",), _F),
        "cross_entropy_kind_": Array(("E",), "U"),
        "cross_entropy_bounds_": Array(("E", 2), _F),
        "_graph_codes": Codes("n"),
        "node_ids_": Array(("n",), "iU"),
    },
)

#: For each type a model file holds: the sizes it fixes and its attributes' rules.
RULES: dict[type, Table] = {
    EncoderClassifier: Table(
        given=(_classes, _features, _kernels),
        attributes={
            **_CLASSES,
            "class_counts_": Array(("K",), "fiu"),
            "class_means_": Array(("K", "w"), _F),  # U
            "kernels_": Each(None, "M"),
            "_kernel_specs": Each(None, "M"),
            "kernel_index_": Index("M"),
            "lda_models_": Each(Nested("K", "C", d="K"), "M"),  # Z = δ(X, U) has K columns
            "coef_": Array(("C", "K"), _F),
            "intercept_": Array(("C",), _F),
            "embedding_means_": Array(("K", "K"), _F),
            "cross_entropy_": Array(("M",), _F),
            "cross_entropy_kind_": Array(("M",), "U"),
            "cross_entropy_bounds_": Array(("M", 2), _F),
            "_x_moments_total": Fields(
                {**_MOMENTS, "scatter": Array(("w", "w"), _F), "sqnorm": Array(("K",), _F)}
            ),
            "_z_totals": Each(
                Fields(
                    {**_MOMENTS, "mean": Array(("K", "K"), _F), "scatter": Array(("K", "K"), _F)}
                ),
                "M",
                nullable=True,
            ),
            "_loglik_total": Array(("M",), _F, number=True),
        },
    ),
    FeatureEncoder: Table(
        given=(_encoder_sizes,),
        attributes={
            "numeric_fill": Array(("q",), _F),
            "categories": Each(Array((None,)), "g"),
            "categorical_fill": Each(None, "g"),
        },
    ),
    LDAModel: Table(
        {
            "coef": Array(("C", "d"), _F),
            "intercept": Array(("C",), _F),
            "means": Array(("K", "d"), _F),
            "priors": Array(("K",), _F),
            "scalings": Array(("d", None), _F),
            "xbar": Array(("d",), _F),
            "explained_variance_ratio": Array((None,), _F),
        }
    ),
    NRBFNClassifier: Table(
        given=(_classes, _features, _alpha_grid),
        attributes={
            **_CLASSES,
            "basis_": Array(("r", "w"), _F),
            "basis_indices_": Array(("r",), _I),
            "weights_": Array(("K", "r"), _F),
            "candidate_indices_": Array(("c",), _I),
            "confidence_": Array(("c",), _F),
            "cv_error_": Array(("G",), _F, nullable=True),
        },
    ),
    LRClassifier: Table(
        given=(_classes, _features),
        attributes={
            **_CLASSES,
            "weights_": Array(("K", "w+1"), _F),  # a column for √β, one per feature
            "coef_": Array(("K", "w"), _F),
            "intercept_": Array(("K",), _F),
            "mean_": Array(("w",), _F),
        },
    ),
    CCDR: Table(
        given=(_classes, _features, _components),
        attributes={
            **_CLASSES,
            "n_components_": Count("m"),
            "centers_": Array(("K", "m"), _F),
            "eigenvalues_": Array(("m",), _F),
            "embedding_": Array(("s", "m"), _F),
            "subsample_indices_": Array(("s",), _I),
            "intrinsic_dimension_": Array(("K",), _F, nullable=True),
            "rotations_": Array(("B", "m", "m"), _F),
            "solutions_": Each(Nested("K", "w", "m"), "B"),
        },
    ),
    CCDRSolution: Table(
        {
            "indices": Array(("n",), _I),
            "X": Array(("n", "w"), _F),
            "codes": Array(("n",), "i"),
            "centers": Array(("K", "m"), _F),
            "embedding": Array(("n", "m"), _F),
            "eigenvalues": Array(("m",), _F),
            "W": Array(("n", "n"), _F, sparse=True),
            "rotation": Array(("m", "m"), _F),
            "info": Fields({"intrinsic_dimension": Array(("K",), _F, nullable=True)}),
        }
    ),
    CCDRClassifier: Table(
        given=(_classes, _features, _components),
        attributes={
            **_CLASSES,
            # a read-only view of ccdr_'s (as are centers_, … checked in ccdr_): the m
            # that the head shares with the embedding
            "n_components_": Count("m"),
            "ccdr_": Nested("K", "p", "w", "m"),
            "head_": Nested("K", "C", "m"),
        },
    ),
    LinearHead: Table({"coef": Array(("m+1", "K"), _F)}),  # least squares on [y, 1]
    LDAHead: Table({"model": Nested("K", "C", d="m")}),
    KNNHead: Table(
        {"F": Array(("n", "m"), _F), "codes": Array(("n",), "i"), "n_classes": Count("K")}
    ),
}


# --- the walk ----------------------------------------------------------------------------


def check_shapes(model, where: str) -> None:
    """Refuse a loaded model whose arrays disagree with each other or its parameters.

    Parameters
    ----------
    model : a scalenc estimator rebuilt from a model file
    where : str
        The file, for the message.

    Raises
    ------
    ModelFileError
        Naming the first array that does not fit, its shape and dtype, what was expected
        and the sizes that say so.
    """
    _check_object(model, type(model).__name__, _Scope(where))


def _check_object(obj, path: str, scope: _Scope) -> None:
    table = RULES.get(type(obj))
    if type(obj) is EncoderClassifier and getattr(obj, "_graph_codes", None) is not None:
        table = GRAPH_ENCODER
    if table is None:
        return  # a kernel, or nothing the table describes
    for given in table.given:
        for name, value, source in given(obj):
            source = source.format(path)
            if value is None:
                continue
            if not (_is_int(value) and value >= 0):
                raise scope.refuse(source, f"is {value!r}; expected a count")
            if not scope.fits(name, int(value), source):
                known, known_from = scope.sizes[name]
                raise scope.refuse(
                    source, f"is {value}; expected {known} ({name} = {known} from {known_from})"
                )
    _check_attributes(obj, table.attributes, path, scope)
    for agree in table.agree:
        agree(obj, path, scope)


def _check_attributes(obj, rules: dict, path: str, scope: _Scope) -> None:
    for name, rule in rules.items():
        value = _get(obj, name)
        if value is not _ABSENT:
            rule.check(value, f"{path}.{name}", scope)
