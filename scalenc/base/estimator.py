"""What every scalenc estimator shares: input preparation, class and feature checks, the
refusal of non-finite data, lazy block maps for outputs, stage timings, and a streamed
``score``.

Each estimator module is then its parameters, its ``fit`` steps and its docstring:
``fit`` calls :func:`prepare_fit` and the passes of :mod:`scalenc.engine.passes`; ``predict``,
``transform`` and friends call :func:`map_output` with a block function.
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
import os
import time

import dask.array as da
import numpy as np
from sklearn.utils import check_random_state

from scalenc import __version__
from scalenc.base.validation import check_feature_names, invalid
from scalenc.engine import checkpoint, passes, resume
from scalenc.engine import memory as engine_memory
from scalenc.engine.cluster import compute
from scalenc.engine.reads import counting_passes
from scalenc.engine.reduce import split_every_set
from scalenc.exceptions import InputError
from scalenc.io import tables
from scalenc.io.identity import IdentityUnavailable, input_identity
from scalenc.io.inputs import check_xy
from scalenc.io.labels import encode_labels
from scalenc.io.tables import is_dask_frame
from scalenc.math.labels import UNLABELED, sorted_classes, unlabeled_mask
from scalenc.math.moments import magnitude_limit, too_large

__all__ = [
    "fit_streaming",
    "fit_checkpoint",
    "update_streaming",
    "memory_budget",
    "fit_seed",
    "StreamingClassifierMixin",
    "fit_stage",
    "check_classes",
    "check_n_features",
    "refuse_nonfinite",
    "check_class_means",
    "prepare_fit",
    "prepare_input",
    "table_params",
    "fitted_width",
    "check_feature_names_of",
    "map_output",
    "known_row_chunks",
    "unlabeled_marker",
    "expected_failed_checks",
]


def memory_budget(estimator) -> tuple[dict, str]:
    """Bytes ``estimator``'s fit may use per worker process and on the client, and where
    that comes from (:func:`scalenc.engine.memory.memory_budget` with the estimator's
    ``memory_limit``; its block tasks import the estimator's package)."""
    value = getattr(estimator, "memory_limit", None)
    try:
        # a resumed fit plans with the budget its first run had (the memory free varies)
        return checkpoint.remembered(
            "memory-budget",
            lambda: engine_memory.memory_budget(value, task_modules=(type(estimator).__module__,)),
        )
    except ValueError:
        expectation = "an int of bytes, a string such as '4GB', or None"
        raise invalid(estimator, "memory_limit", expectation, value) from None


def fit_seed(estimator, name: str, *, draw_from_int: bool = False) -> int:
    """The seed of the fit's random draws, from ``estimator.random_state``, remembered in
    the fit's checkpoint as ``name``: a resumed fit draws as its first run did, ``None``
    included (each estimator keeps the name its checkpoints always used, so a checkpoint
    written before this function resumes with its own seed).

    An int ``random_state`` is the seed itself; ``None`` or a ``RandomState`` gives one
    int drawn from it in [0, 2**31 - 1). ``draw_from_int=True`` draws from an int too (as
    ``check_random_state(random_state).randint(2**31 - 1)``): CCDR's rule since its first
    release, kept so that its fitted models, and the oracle tests that pin them, do not
    change.
    """
    state = estimator.random_state
    if isinstance(state, numbers.Integral) and not draw_from_int:
        return checkpoint.remembered(name, lambda: int(state))
    return checkpoint.remembered(name, lambda: int(check_random_state(state).randint(2**31 - 1)))


def unlabeled_marker(estimator):
    """The estimator's unlabeled marker (``-1`` for estimators or models without one)."""
    return getattr(estimator, "unlabeled", UNLABELED)


#: scikit-learn estimator checks a scalenc estimator fails by design, with the reason; the
#: one place the test suite (and a user running ``check_estimator``) takes them from.
_CLASSES_CHECK_REASON = (
    "check_classifiers_classes labels a binary problem with the classes -1 and 1. With "
    "unlabeled=-1 (the default, as in sklearn.semi_supervised, whose estimators scikit-learn "
    "exempts from this check by name) -1 marks an unlabeled row, so that problem has one "
    "class; with unlabeled=None the check passes."
)


def expected_failed_checks(estimator) -> dict[str, str]:
    """The named expected failures of scikit-learn's checks for ``estimator``.

    For ``sklearn.utils.estimator_checks.check_estimator(estimator,
    expected_failed_checks=expected_failed_checks(estimator))``: a classifier whose
    unlabeled marker is −1 cannot pass ``check_classifiers_classes`` (its −1 rows are
    unlabeled, not a class); nRBFN's probabilities tie where its decision values do not
    (``check_decision_proba_consistency``); nothing else is expected to fail.
    """
    is_classifier = hasattr(estimator, "predict") and hasattr(estimator, "predict_proba")
    expected = {}
    if is_classifier and unlabeled_marker(estimator) == UNLABELED:
        expected["check_classifiers_classes"] = _CLASSES_CHECK_REASON
    if type(estimator).__name__ == "NRBFNClassifier":
        expected["check_decision_proba_consistency"] = _PROBA_CHECK_REASON
    return expected


_PROBA_CHECK_REASON = (
    "nRBFN's predict_proba clips the negative entries of its scores F̂ (the paper's "
    "quasi-probabilities) and renormalises each row, so every row whose other class scores "
    "at most 0 gets probability 1: their probabilities tie where decision_function's values "
    "do not. With the grown basis and λ chosen on held-out rows (issue 36), which the "
    "rounding of BLAS's sums can tip between runs, this check fails on some machines."
)


def _marker_text(marker) -> str:
    if marker is None:
        return "no label marks unlabeled rows (unlabeled=None)"
    return (
        f"rows labeled {marker!r}, None or NaN are unlabeled (unlabeled={marker!r}, as in "
        f"sklearn.semi_supervised); pass unlabeled=None if every row is labeled and "
        f"{marker!r} is a class"
    )


#: Set while an estimator calls its own output map on input whose names it has checked
#: and whose features it has encoded.
_INPUT_PREPARED = contextvars.ContextVar("scalenc_input_prepared", default=False)


@contextlib.contextmanager
def timed_stage(stage_times: dict | None, stage: str):
    """Add the wall-clock seconds of a stage to ``stage_times[stage]`` (nothing if None):
    a stage run several times (each size of a grown basis) counts them all."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if stage_times is not None:
            stage_times[stage] = stage_times.get(stage, 0.0) + time.perf_counter() - start


def fit_stage(estimator, stage: str):
    """Record the wall-clock seconds of a fit stage in ``estimator.stage_times_[stage]``."""
    return timed_stage(estimator.stage_times_, stage)


def check_classes(classes: np.ndarray, owner: str, marker=UNLABELED) -> None:
    """Refuse a class list with fewer than two classes, naming the estimator and saying
    which labels were read as unlabeled."""
    if classes.size == 0:
        raise InputError(
            f"All rows of y are unlabeled; {owner} needs labeled rows of at least 2 classes "
            f"({_marker_text(marker)})."
        )
    if classes.size == 1:
        raise InputError(
            f"y has labeled rows of only one class ({classes.tolist()[0]!r}); {owner} needs "
            f"at least 2 classes. Add rows of another class ({_marker_text(marker)})."
        )


def table_params(estimator) -> dict:
    """The estimator's ``categorical``, ``handle_unknown`` and ``handle_missing`` (their
    defaults for models saved before they existed)."""
    defaults = {"categorical": "onehot", "handle_unknown": "error", "handle_missing": "error"}
    return {name: getattr(estimator, name, value) for name, value in defaults.items()}


def fitted_width(estimator) -> int:
    """The number of features of the numeric matrix the estimator was fitted on:
    ``n_features_in_``, or the encoded width when categorical columns were encoded."""
    encoder = getattr(estimator, "feature_encoder_", None)
    if encoder is not None and encoder.categorical:
        return encoder.n_output
    return estimator.n_features_in_


def check_n_features(estimator, X) -> None:
    """Refuse X whose number of columns differs from the one seen in ``fit``."""
    if X.shape[1] != fitted_width(estimator):
        raise InputError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting "
            f"{estimator.n_features_in_} features as input."
        )


def refuse_nonfinite(count) -> None:
    """Refuse X after a pass counted ``count`` NaN or infinite values in it."""
    if count:
        raise InputError(
            f"X contains {int(count)} NaN or infinite value(s); impute or drop them "
            "(e.g. with sklearn.impute.SimpleImputer) before fitting."
        )


def check_class_means(means: np.ndarray, dtype) -> None:
    """Refuse class means beyond the magnitude the data's dtype can square: a few rows of
    huge values (1e30 in float32) that would dominate every statistic of the fit."""
    limit = magnitude_limit(dtype)
    peaks = np.abs(np.asarray(means)).max(axis=0) if np.size(means) else np.zeros(0)
    if np.any(peaks > limit):
        column = int(np.argmax(peaks))
        raise too_large(column, f"has a class mean of {peaks[column]:.3g}", dtype)


def _columns_of(X):
    """What scikit-learn reads column names from: a Dask DataFrame's or a table's empty
    pandas meta (same columns, nothing computed), an empty DataFrame of the columns of an
    array read from a table (:func:`scalenc.io.tables.column_names`), anything else as it
    is."""
    if isinstance(X, tables.Table):
        return X.meta
    if isinstance(X, da.Array):
        names = tables.column_names(X)
        if names is None:
            return X
        import pandas as pd  # deferred: pandas is imported only for tables

        return pd.DataFrame(columns=names)
    return X._meta if is_dask_frame(X) else X


def _by_name(estimator, X):
    """X with the columns ``fit`` saw, in the fit's order, taken by name: a table whose
    columns come in another order (a Parquet file written with them reordered) is
    reordered, one that lacks some is refused naming them. X as it is when either side
    has no names."""
    fitted = getattr(estimator, "feature_names_in_", None)
    names = tables.column_names(X)
    if fitted is None or names is None:
        return X
    fitted = [str(name) for name in fitted]
    given = [str(name) for name in names]
    if given == fitted:
        return X
    missing = [name for name in fitted if name not in set(given)]
    if missing:
        raise InputError(
            f"X has no column(s) {missing[:10]}{' …' if len(missing) > 10 else ''}, which "
            f"{type(estimator).__name__} was fitted on (its columns: {fitted[:20]}); X's "
            f"columns are {given[:20]}. Give a table with every column of the fit (in any "
            "order: they are matched by name)."
        )
    if len(set(given)) != len(given):
        return X  # repeated names: scikit-learn's check says which
    return tables.select_columns(X, [names[given.index(name)] for name in fitted])


def fit_streaming(estimator, X, y, *, find_classes: bool = True, labels=None, **fit_params):
    """The one way into every scalenc estimator's ``fit``; returns the estimator.

    1. The parameters are checked (``estimator._check_params()``: scikit-learn's
       constraints, then what they cannot express), before anything is read.
    2. (X, y) become aligned row-chunked Dask arrays (:func:`prepare_fit`), with the
       class codes in place of y when ``find_classes`` (one pass over y).
    3. The estimator's steps run, ``estimator._fit(X, y, params, **fit_params)`` with
       ``params`` what step 1 returned, timing its stages in ``stage_times_``.
    4. ``n_passes_`` is the number of passes over X the steps computed, counted by the
       engine where X is read (:func:`scalenc.engine.reads.counting_passes`).

    The steps' reductions have the estimator's ``split_every`` as their fan-in where it
    is set, else the configured one (:func:`scalenc.engine.reduce.fan_in`).

    A fit without X (the encoder's graph alone) passes X None and ``labels``, the
    function that makes y the labels' Dask array in step 2; it reads no X, so the engine
    counts no pass over it.

    With a ``checkpoint``, steps 2–4 run inside it (:func:`fit_checkpoint`), and run
    again from it, as a rerun would, when a cluster loses the fit's tasks to dead workers
    or a lost scheduler, while each attempt saves new work
    (:func:`scalenc.engine.resume.fit_resuming`; ``checkpoint_summary_["attempts"]``).
    """
    params = estimator._check_params()

    def steps(run):
        with split_every_set(getattr(estimator, "split_every", None)):
            if labels is not None and X is None:
                Xd, yd = None, labels(y)
            else:
                Xd, yd = prepare_fit(estimator, X, y, find_classes=find_classes)
            estimator.stage_times_ = {}
            with counting_passes(Xd) as count:
                estimator._fit(Xd, yd, params, **fit_params)
        return count

    count, run = resume.fit_resuming(
        lambda: fit_checkpoint(estimator, X, y), steps, owner=type(estimator).__name__
    )
    estimator.n_passes_ = count.passes
    if run is not None:
        estimator.checkpoint_summary_ = run.summary()
    if hasattr(estimator, "_statistics"):
        estimator.n_updates_ = 0
    return estimator


def update_streaming(estimator, X, y, classes=None):
    """The one way into ``partial_fit`` of the estimators whose statistics are sums (the
    encoder, LRC, nRBFN, CCDRClassifier's linear and LDA heads); returns the estimator.

    The first call, on an estimator not fitted yet, is ``fit`` on the batch (which must
    hold labeled rows of every class in ``classes``), unless the estimator starts its
    updates itself: an estimator with the hook ``_start_updates(params)`` (the encoder,
    whose statistics grow from nothing) takes its classes from ``classes``, required
    then; the hook sets up empty statistics, and the batch, which may lack some classes,
    is the first update (its table columns encoded as ``fit`` encodes them).
    Later calls, or a first call on a fitted model (one loaded from a model file
    included), read only the new batch: ``estimator._update(X, codes)`` merges its
    statistics with the stored ones (``estimator._statistics`` names them) and solves
    again. ``n_passes_`` counts the passes over the batch, ``n_updates_`` the updates
    since ``fit`` (or since the first call that started the model).
    """
    with split_every_set(getattr(estimator, "split_every", None)):
        wanted = None if classes is None else sorted_classes(classes)
        first = not hasattr(estimator, "classes_")
        if first and not hasattr(estimator, "_start_updates"):
            return _fit_first_batch(estimator, X, y, wanted)
        if first:
            Xd, y = _start_updates(estimator, X, y, wanted)
        else:
            Xd, y = _update_input(estimator, X, y, wanted)
        codes = encode_labels(y, estimator.classes_, unlabeled_marker(estimator))
        estimator.stage_times_ = {}
        with counting_passes(Xd) as count:
            try:
                estimator._update(Xd, codes)
            except BaseException:
                if first:  # the model is not started: the next call starts it again
                    del estimator.classes_
                raise
        estimator.n_passes_ = count.passes
        estimator.n_updates_ = 0 if first else getattr(estimator, "n_updates_", 0) + 1
        return estimator


def _fit_first_batch(estimator, X, y, wanted):
    """The first ``partial_fit`` of an estimator not fitted yet: ``fit`` on the batch."""
    fit_streaming(estimator, X, y)
    if wanted is not None and not np.array_equal(wanted, estimator.classes_):
        missing = sorted(set(wanted.tolist()) - set(estimator.classes_.tolist()))
        raise InputError(
            f"The first partial_fit batch of {type(estimator).__name__} has labeled rows "
            f"of the classes {estimator.classes_.tolist()}, not of {missing}: the first "
            "batch fits the model and must hold every class of classes=."
        )
    return estimator


def _start_updates(estimator, X, y, classes):
    """(X, y) of the first ``partial_fit`` of an estimator that starts its updates itself:
    parameters and ``classes`` checked before anything is read, the hook's empty
    statistics, the table encoding and ``n_features_in_`` learned from the batch."""
    params = estimator._check_params()
    if classes is None:
        raise InputError(
            "classes must be passed on the first call to partial_fit, listing every "
            "class that will ever appear (e.g. classes=np.unique(y_all))."
        )
    check_classes(classes, type(estimator).__name__, unlabeled_marker(estimator))
    estimator._start_updates(params)
    Xd, y = prepare_fit(estimator, X, y, find_classes=False)
    estimator.classes_ = classes
    return Xd, y


def _update_input(estimator, X, y, wanted):
    """(X, y) of a batch that updates a fitted model: the classes and the stored
    statistics checked, X's columns checked and encoded as in ``fit``."""
    if wanted is not None and not np.array_equal(wanted, estimator.classes_):
        raise InputError(
            f"classes={wanted.tolist()} differs from the model's classes "
            f"{estimator.classes_.tolist()}; an update cannot add or remove classes."
        )
    if getattr(estimator, estimator._statistics, None) is None:
        raise InputError(
            f"This {type(estimator).__name__} holds no statistics to update (it was fitted "
            f"{_no_statistics_reason(estimator)}); fit it again on all the data."
        )
    estimator._check_params()
    return _checked_input(estimator, X, y, require_y=True)


def _no_statistics_reason(estimator) -> str:
    reason = getattr(estimator, "_no_statistics_reason", None)
    return reason() if callable(reason) else "by a scalenc that did not keep them"


def fit_checkpoint(estimator, X, y):
    """The checkpoint of ``estimator``'s fit on (X, y) (:mod:`scalenc.engine.checkpoint`),
    a context giving its run, or giving None where the estimator has no ``checkpoint``.

    The checkpoint's key: the estimator's class and parameters (``checkpoint`` aside), the
    scalenc version and the identity of X and y (:func:`scalenc.io.identity.input_identity`:
    their graphs, row chunks and files' sizes and modification times; no data is read).
    """
    url = getattr(estimator, "checkpoint", None)
    if url is None:
        return contextlib.nullcontext(None)
    _refuse_file(url)
    try:
        key = {
            "estimator": type(estimator).__name__,
            "version": __version__,
            "parameters": {
                name: _key_value(value)
                for name, value in sorted(estimator.get_params(deep=False).items())
                if name != "checkpoint"
            },
            "X": input_identity(X),
            "y": input_identity(y),
        }
    except IdentityUnavailable as exc:
        raise InputError(f"The fit cannot be checkpointed at {url!r}: {exc}") from None
    return checkpoint.checkpointing(url, key)


def _refuse_file(url) -> None:
    """Refuse a local checkpoint location that is a regular file (a checkpoint is a
    directory; an object store's prefix can be both, so only local paths are checked)."""
    path = os.fspath(url)
    if "://" in path and not path.startswith("file://"):
        return
    if os.path.isfile(path.removeprefix("file://")):
        raise InputError(
            f"The checkpoint {path!r} is a file; a checkpoint is a directory that the fit "
            "writes its passes' results in. Name a directory (a new one, or this fit's "
            "earlier checkpoint), or move the file away."
        )


def _key_value(value):
    """A parameter as the checkpoint's key holds it: plain JSON, or a token."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if np.isfinite(value) else repr(value)
    if isinstance(value, np.generic):
        return _key_value(value.item())
    if isinstance(value, (list, tuple)):
        return [_key_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _key_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return {"token": checkpoint.fingerprint(value) or repr(value)}


def prepare_fit(estimator, X, y, *, find_classes: bool = True):
    """(X, y) as aligned Dask arrays for ``fit``; sets ``n_features_in_``,
    ``feature_encoder_`` and, for a DataFrame with string column names,
    ``feature_names_in_``.

    A table's string, categorical and boolean columns are encoded, and missing values
    imputed where the estimator's ``handle_missing`` asks (:mod:`scalenc.io.tables`: one
    pass over a Dask table, one over X to impute an array); ``feature_encoder_`` holds what
    was learned (None when nothing was). With ``find_classes`` (one pass over y), also
    sets ``classes_`` (at least two classes) and returns the class codes instead of y.
    """
    check_feature_names_of(estimator, X, reset=True)
    params = table_params(estimator)
    X, encoder = tables.fit_features(X, params)
    X, y = check_xy(
        X,
        y,
        chunk_rows=getattr(estimator, "chunk_rows", None),
        estimator=estimator,
        require_y=True,
    )
    if encoder is None:
        X, encoder = tables.impute_array(X, params)
    estimator.feature_encoder_ = encoder
    estimator.n_features_in_ = len(encoder.columns) if encoder is not None else X.shape[1]
    if not find_classes:
        return X, y
    marker = unlabeled_marker(estimator)
    classes = passes.find_classes(y, marker=marker)
    check_classes(classes, type(estimator).__name__, marker)
    estimator.classes_ = classes
    return X, encode_labels(y, classes, marker)


def _checked_input(estimator, X, y=None, *, require_y: bool = False):
    """(X, y) of a fitted estimator as its ``fit`` saw them, as aligned row-chunked Dask
    arrays: X's columns taken by name in the fit's order and a table's encoded as in
    ``fit`` (its partitions' rows counted when there are labels to align), the fitted
    number of features checked, missing values of an array imputed as ``fit`` learned."""
    encoder = getattr(estimator, "feature_encoder_", None)
    X = check_feature_names_of(estimator, X, reset=False)
    if encoder is not None and encoder.categorical:
        X = tables.encode_features(X, encoder, known_lengths=y is not None)
    Xd, y = check_xy(
        X, y, chunk_rows=getattr(estimator, "chunk_rows", None), estimator=estimator,
        require_y=require_y, known_lengths=y is not None,
    )  # fmt: skip
    check_n_features(estimator, Xd)
    if encoder is not None and not encoder.categorical and encoder.handle_missing == "impute":
        Xd = tables.fill_array(Xd, encoder)
    return Xd, y


def prepare_input(estimator, X) -> tuple[da.Array, bool]:
    """X for an output map: a row-chunked Dask array with the fitted number of features
    (and, if ``fit`` saw column names, those columns taken by name in the fit's order; a
    table's columns encoded as in ``fit``), and whether X came as a Dask collection or a
    lazy table (then the output stays lazy)."""
    is_dask = isinstance(X, (da.Array, tables.Table)) or is_dask_frame(X)
    if not _INPUT_PREPARED.get():
        return _checked_input(estimator, X)[0], is_dask
    Xd, _ = check_xy(X, chunk_rows=getattr(estimator, "chunk_rows", None), known_lengths=False)
    check_n_features(estimator, Xd)
    return Xd, is_dask


def known_row_chunks(X: da.Array) -> da.Array:
    """X with its row chunk sizes known (a Dask DataFrame's partitions counted on the
    workers when they were left unknown for a lazy output map)."""
    return X.compute_chunk_sizes() if any(np.isnan(c) for c in X.chunks[0]) else X


def map_output(estimator, X, block_fn, n_out, dtype, **kwargs):
    """One lazy block map ``block_fn(X_b, **kwargs)`` over X: NumPy in gives NumPy out,
    Dask in gives a lazy Dask array out.

    ``dtype=None`` means X's float dtype, and so does an ``out_dtype=None`` keyword.
    """
    Xd, is_dask = prepare_input(estimator, X)
    dtype = Xd.dtype if dtype is None else dtype
    if "out_dtype" in kwargs and kwargs["out_dtype"] is None:
        kwargs["out_dtype"] = Xd.dtype
    out = passes.map_rows(block_fn, Xd, n_out, dtype, **kwargs)
    return out if is_dask else compute(out)[0]


class StreamingClassifierMixin:
    """``score`` as accuracy over the labeled rows, and the no-NaN input tag.

    Put it before scikit-learn's ``ClassifierMixin`` in the bases. For Dask input the
    accuracy is one reduction over the lazy predictions (nothing n-sized reaches the
    client); for NumPy input, or with ``sample_weight``, it is computed in memory.
    """

    def score(self, X, y, sample_weight=None):
        """Accuracy over the labeled rows of (X, y); unlabeled rows (see ``unlabeled``) are
        left out.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import LRClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = LRClassifier().fit(X, y)
        >>> model.score(X, y) == float(np.mean(model.predict(X) == y))
        True

        Rows labeled ``-1`` (see ``unlabeled``) are left out:

        >>> y_half = y.copy()
        >>> y_half[::2] = -1
        >>> model.score(X, y_half) == float(np.mean(model.predict(X[1::2]) == y[1::2]))
        True

        Dask input is scored in one pass, block by block:

        >>> import dask.array as da
        >>> Xd, yd = da.from_array(X, chunks=50), da.from_array(y, chunks=50)
        >>> model.score(Xd, yd) == model.score(X, y)
        True
        """
        lazy = isinstance(X, (da.Array, tables.Table)) or is_dask_frame(X)
        if sample_weight is not None or not lazy:
            y_arr = np.asarray(compute(y)[0] if isinstance(y, da.Array) else y)
            keep = ~unlabeled_mask(y_arr, unlabeled_marker(self))
            pred = self.predict(X)
            pred = np.asarray(compute(pred)[0] if isinstance(pred, da.Array) else pred)
            weights = None if sample_weight is None else np.asarray(sample_weight)[keep]
            return float(np.average(pred[keep] == y_arr[keep], weights=weights))
        Xd, yd = _checked_input(self, X, y)
        codes = encode_labels(yd, self.classes_, unlabeled_marker(self))
        token = _INPUT_PREPARED.set(True)  # X's names were checked and encoded above
        try:
            pred_codes = encode_labels(self.predict(Xd), self.classes_, None)
        finally:
            _INPUT_PREPARED.reset(token)
        labeled = codes >= 0
        correct, total = compute((pred_codes == codes)[labeled].sum(), labeled.sum())
        return float(correct) / float(total)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


def check_feature_names_of(estimator, X, *, reset: bool):
    """Set (``reset``) or check ``feature_names_in_`` from X's column names, for any
    DataFrame, Dask's included, and an array read from a table (scikit-learn's rules and
    messages); returns X, with its columns taken by name in the fit's order when they come
    in another (:func:`_by_name`)."""
    if not reset:
        X = _by_name(estimator, X)
    check_feature_names(estimator, _columns_of(X), reset=reset)
    return X
