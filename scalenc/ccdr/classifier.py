""":class:`CCDRClassifier`: CCDR's embedding followed by a classifier head (the paper's
least-squares "linear" head, LDA or k-NN), fitted on the embedded rows in one more pass.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
)
from sklearn.utils.validation import check_is_fitted

from scalenc.base.estimator import (
    StreamingClassifierMixin,
    fit_stage,
    fit_streaming,
    map_output,
    update_streaming,
)
from scalenc.base.validation import Integral, Interval, StrOptions, document_table_parameters
from scalenc.ccdr import blocks as cb
from scalenc.ccdr import passes
from scalenc.ccdr.transformer import CCDR, CCDR_CONSTRAINTS, fit_ccdr
from scalenc.engine.cluster import compute
from scalenc.exceptions import DataWarning
from scalenc.math.labels import user_stacklevel
from scalenc.math.moments import merge_partials

__all__ = [
    "CCDRClassifier",
]


def _view(name: str, what: str) -> property:
    """A read-only fitted attribute of :class:`CCDRClassifier`: its ``ccdr_``'s ``name``."""

    def get(self):
        return getattr(self.ccdr_, name)

    get.__doc__ = f"""{what}: ``ccdr_.{name}``, read-only.

        Examples
        --------
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> clf = CCDRClassifier(n_neighbors=10, subsample_size=60, random_state=0).fit(X, y)
        >>> clf.{name} is clf.ccdr_.{name}
        True
        """
    return property(get)


# --- the classifier ------------------------------------------------------------------------


@document_table_parameters
class CCDRClassifier(
    StreamingClassifierMixin,
    ClassifierMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    BaseEstimator,
):
    """CCDR followed by a classifier on the m-dim embedding (the paper's Section V).

    Parameters
    ----------
    n_components, beta, n_neighbors, epsilon, subsample_size, n_subsamples, random_state,
    memory_limit, unlabeled, categorical, handle_unknown, handle_missing, chunk_rows,
    split_every, checkpoint
        As for :class:`CCDR`.
    classifier : {"linear", "knn", "lda"}, default="linear"
        ``"linear"``: the paper's least-squares classifier — for each class k,
        [α_k, α_0k] = argmin Σ_i (y_iᵀα + α_0 − c_ki)², predict argmax_k; probabilities are
        the softmax of these scores. ``"knn"``: a majority vote of the
        ``classifier_neighbors`` nearest labeled subsample rows in the embedding;
        probabilities are the vote fractions. ``"lda"``: linear discriminant analysis of
        the embedding (as scikit-learn's ``LinearDiscriminantAnalysis``).
    classifier_neighbors : int, default=5
        k of the ``"knn"`` classifier.

    Attributes
    ----------
    ccdr_ : CCDR
        The fitted transformer, holding the result of CCDR's steps
        (:func:`~scalenc.ccdr.transformer.fit_ccdr`, run once by this fit).
    classes_, n_features_in_
        As for :class:`CCDR`.
    n_components_, intrinsic_dimension_, centers_, eigenvalues_, embedding_, subsample_indices_
        As for :class:`CCDR`: read-only views of ``ccdr_``'s.
    n_passes_ : int
        Passes over X by ``fit``: CCDR's one, plus one for ``"linear"`` and ``"lda"``
        (their statistics over the embedding f(x_i, c_i) of every labeled training row)
        unless S is all of X (one subsample covering every row), where the eigenvectors
        already are that embedding. ``"knn"`` needs no extra pass: its reference set is
        the labeled subsample rows (B·s rows, bounded memory), embedded with their labels.
    stage_times_ : dict
        Wall-clock seconds of the fit stages: CCDR's ``draw``, ``gather`` and ``solve``
        (see :class:`CCDR`), and ``extension`` (the Nyström extension of the labeled
        training rows with the head's statistics: the pass over X, when there is one,
        and the head's solve).

    Notes
    -----
    Training rows are embedded with their labels, f(x_i, c_i) (the paper trains on the
    CCDR embedding y_i of the labeled data); ``predict`` embeds with c = 0. Memory: the
    linear head is (m+1)×L, LDA's O(m² + Lm), k-NN's B·s×m; per task one row block.
    ``predict``, ``predict_proba`` and ``transform`` are one lazy block map over X.

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from scalenc import CCDRClassifier
    >>> X, y = load_wine(return_X_y=True)
    >>> ccdr = CCDRClassifier(n_components=2, n_neighbors=10, random_state=0)
    >>> model = make_pipeline(StandardScaler(), ccdr).fit(X, y)
    >>> float(model.score(X, y)) > 0.95
    True
    >>> model[-1].n_passes_, model.predict_proba(X[:2]).shape
    (1, (2, 3))
    """

    @property
    def _n_features_out(self) -> int:
        """Columns of ``transform`` (for ``get_feature_names_out``)."""
        return self.eigenvalues_.size

    _parameter_constraints: dict = {
        **CCDR_CONSTRAINTS,
        "classifier": [StrOptions({"linear", "knn", "lda"})],
        "classifier_neighbors": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_components="auto",
        *,
        beta=0.5,
        n_neighbors=4,
        epsilon=None,
        subsample_size=10000,
        n_subsamples=1,
        random_state=None,
        classifier="linear",
        classifier_neighbors=5,
        memory_limit=None,
        unlabeled=-1,
        categorical="onehot",
        handle_unknown="error",
        handle_missing="error",
        chunk_rows=None,
        split_every=None,
        checkpoint=None,
    ):
        self.n_components = n_components
        self.beta = beta
        self.n_neighbors = n_neighbors
        self.epsilon = epsilon
        self.subsample_size = subsample_size
        self.n_subsamples = n_subsamples
        self.random_state = random_state
        self.classifier = classifier
        self.classifier_neighbors = classifier_neighbors
        self.memory_limit = memory_limit
        self.unlabeled = unlabeled
        self.categorical = categorical
        self.handle_unknown = handle_unknown
        self.handle_missing = handle_missing
        self.chunk_rows = chunk_rows
        self.split_every = split_every
        self.checkpoint = checkpoint

    def fit(self, X, y):
        """Fit CCDR on (X, y), then the classifier on the embedded labeled rows.

        Parameters
        ----------
        X : array-like, Dask array or Zarr array of shape (n, p)
        y : array-like or Dask array of shape (n,); ``unlabeled`` (−1 by default), None and
            NaN mark unlabeled rows.

        Returns
        -------
        self

        Examples
        --------
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> clf = CCDRClassifier(n_neighbors=10, subsample_size=100, random_state=0)
        >>> clf.fit(X, y).n_passes_  # the subsample gather, then the head's statistics
        2
        >>> clf.head_.__class__.__name__, clf.score(X, y) > 0.9
        ('LinearHead', True)
        """
        return fit_streaming(self, X, y)

    def _check_params(self) -> None:
        self._validate_params()

    def _fit(self, Xd, codes, params):
        """CCDR's steps (:func:`~scalenc.ccdr.transformer.fit_ccdr`), their result kept by
        the transformer ``ccdr_``, then the head's statistics on the embedding (one
        more pass, unless the subsample is all of X)."""
        self.ccdr_ = self._transformer(fit_ccdr(self, Xd, codes))
        with fit_stage(self, "extension"):
            self.head_ = self._fit_head(Xd, codes)
        self._check_head()

    def _check_head(self) -> None:
        """Warn when the head predicts the reference subsample's labeled rows, embedded as
        ``predict`` embeds a row (without its label), no better than the most frequent
        class: the embedding then keeps the classes apart only through the labels it was
        given (on 2 rows a class the classes' clusters land on other classes' centres)."""
        sols = self.ccdr_.solutions_
        labeled = np.flatnonzero(sols[0].codes >= 0)
        labeled = labeled[np.linspace(0, labeled.size - 1, min(labeled.size, 512)).astype(int)]
        codes = sols[0].codes[labeled]  # at most 512 rows, evenly spaced: a cheap check
        F = cb.embed(sols[0].X[labeled], None, sols)
        right = float(np.mean(np.argmax(self.head_.proba(F), axis=1) == codes))
        prior = np.bincount(codes, minlength=self.classes_.size)
        if right <= prior.max() / codes.size:
            warnings.warn(
                f"{type(self).__name__} predicts {right:.0%} of {codes.size} of its labeled "
                "subsample rows right when they are embedded as predict embeds new rows "
                f"(without their labels): no better than the most frequent class "
                f"({prior.max() / codes.size:.0%}). The embedding separates the classes "
                "only through the labels, so its predictions say little; this happens with "
                f"very few rows a class (here as few as {prior[prior > 0].min()}). Give "
                "more labeled rows, or use LinearDiscriminantAnalysis or a k-NN classifier.",
                DataWarning,
                stacklevel=user_stacklevel(),
            )

    def _transformer(self, result) -> CCDR:
        """The fitted :class:`CCDR` of this fit: ``result``, the classes, and the input
        encoding learned by this estimator (its ``transform`` encodes as this does)."""
        names = set(CCDR._get_param_names()) - {"checkpoint"}  # ccdr_ is not checkpointed
        ccdr = CCDR(**{name: getattr(self, name) for name in names})
        ccdr._keep(result)
        ccdr.classes_ = self.classes_
        for name in ("feature_encoder_", "n_features_in_", "feature_names_in_"):
            if hasattr(self, name):
                setattr(ccdr, name, getattr(self, name))
        return ccdr

    # CCDR's fitted attributes: read-only views of the transformer's
    n_components_ = _view("n_components_", "m, the embedding's dimension")
    intrinsic_dimension_ = _view("intrinsic_dimension_", "Each class's intrinsic dimension")
    centers_ = _view("centers_", "The class centers in the embedding (L×m)")
    eigenvalues_ = _view("eigenvalues_", "The eigenvalues of the embedding's m directions")
    embedding_ = _view("embedding_", "The reference subsample's embedded rows (s×m)")
    subsample_indices_ = _view("subsample_indices_", "The reference subsample's rows of X")

    def _fit_head(self, X, codes):
        L = self.classes_.size
        sols = self.ccdr_.solutions_
        if self.classifier == "knn":  # reference set: the union of the subsamples' rows
            index = np.concatenate([s.indices for s in sols])
            _, first = np.unique(index, return_index=True)
            rows = np.vstack([s.X for s in sols])[first]
            codes = np.concatenate([s.codes for s in sols])[first]
            F = cb.nystrom_ensemble(sols, rows, codes)
            self._head_stats = None
            return cb.KNNHead(F, codes, L, self.classifier_neighbors)
        if len(sols) == 1 and sols[0].indices.size == X.shape[0]:
            # S is all of X: the eigenvectors are the training embedding (no pass needed)
            block = cb.linear_stats_block if self.classifier == "linear" else cb.lda_stats_block
            stats = block(sols[0].X, sols[0].codes, row_start=0, solutions=sols, n_classes=L)
        else:
            stats = self._embedding_stats(X, codes, sum(int(s.indices.size) for s in sols))
        self._head_stats = stats
        return self._head_from(stats)

    def _embedding_stats(self, X, codes, reference_rows: int | None = None):
        """The head's statistics over the labeled rows of X, embedded with their labels
        (one pass over X)."""
        (stats,) = compute(
            passes.embedding_stats_pass(
                X,
                codes,
                self.classifier,
                self.ccdr_._solutions_task(),
                self.classes_.size,
                reference_rows=reference_rows,
            )
        )
        return stats

    def _head_from(self, stats):
        if self.classifier == "linear":
            return cb.LinearHead(stats["gram"], stats["cross"])
        return cb.LDAHead(stats)

    #: the statistics :meth:`partial_fit` extends
    _statistics = "_head_stats"

    def partial_fit(self, X, y, classes=None):
        """Update the classifier head with a new batch of rows, reading only the batch.

        The embedding stays as ``fit`` solved it (CCDR's eigenproblem on its subsamples
        is not a sum over rows: refit to let new rows shape it); the batch's rows are
        embedded by the Nyström formula with their labels, as ``fit`` embeds the
        training rows, and their statistics added to the head's: for ``"linear"`` and
        ``"lda"`` exactly the head ``fit`` would give over every row seen with this
        embedding. ``"knn"`` votes among the subsample and cannot be updated. On a model
        not fitted yet, the first call is ``fit`` on the batch.

        Parameters
        ----------
        X, y : the new batch.
        classes : array-like, optional
            Every class; checked against the model's (an update cannot add a class).

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> old, new = np.arange(178) % 4 != 0, np.arange(178) % 4 == 0
        >>> clf = CCDRClassifier(n_neighbors=10, subsample_size=80, random_state=0)
        >>> clf = clf.fit(X[old], y[old]).partial_fit(X[new], y[new])
        >>> clf.n_passes_, clf.n_updates_, clf.score(X, y) > 0.9
        (1, 1, True)
        """
        return update_streaming(self, X, y, classes)

    def _update(self, X, codes):
        """The batch's head statistics on the fixed embedding, merged with the model's."""
        self._head_stats = merge_partials(self._head_stats, self._embedding_stats(X, codes))
        self.head_ = self._head_from(self._head_stats)

    def _no_statistics_reason(self) -> str:
        if self.classifier == "knn":
            return (
                "with classifier='knn', which votes among the subsample's rows: there is no "
                "sum over rows to extend"
            )
        return "by a scalenc that did not keep them"

    def _map(self, X, block_fn, n_out, dtype, **kwargs):
        check_is_fitted(self, "head_")
        solutions = self.ccdr_._solutions_task()
        return map_output(
            self, X, block_fn, n_out, dtype, solutions=solutions, head=self.head_, **kwargs
        )

    def transform(self, X, y=None):
        """The CCDR embedding (see :meth:`CCDR.transform`).

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> clf = CCDRClassifier(n_components=2, n_neighbors=10, random_state=0).fit(X, y)
        >>> np.array_equal(clf.transform(X), clf.ccdr_.transform(X))
        True
        >>> clf.get_feature_names_out().tolist()
        ['ccdrclassifier0', 'ccdrclassifier1']
        """
        check_is_fitted(self, "head_")
        return self.ccdr_.transform(X, y)

    def predict_proba(self, X):
        """Class probabilities, shape (n, L); rows sum to one.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> clf = CCDRClassifier(n_components=2, n_neighbors=10, random_state=0).fit(X, y)
        >>> P = clf.predict_proba(X)
        >>> P.shape, np.allclose(P.sum(axis=1), 1.0)
        ((178, 3), True)
        >>> np.array_equal(clf.classes_[P.argmax(axis=1)], clf.predict(X))
        True
        """
        check_is_fitted(self, "head_")
        return self._map(X, cb.proba_block, self.classes_.size, np.float64)

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba`.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> clf = CCDRClassifier(n_components=2, n_neighbors=10, random_state=0).fit(X, y)
        >>> np.allclose(np.exp(clf.predict_log_proba(X[:5])), clf.predict_proba(X[:5]))
        True
        """
        proba = self.predict_proba(X)
        with np.errstate(divide="ignore"):
            return da.log(proba) if isinstance(proba, da.Array) else np.log(proba)

    def decision_function(self, X):
        """Classifier scores on the embedding, shape (n, L); (n,) for two classes (s₁ − s₀).

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> clf = CCDRClassifier(n_components=2, n_neighbors=10, random_state=0).fit(X, y)
        >>> S = clf.decision_function(X)
        >>> S.shape, np.array_equal(clf.classes_[S.argmax(axis=1)], clf.predict(X))
        ((178, 3), True)
        """
        check_is_fitted(self, "head_")
        binary = self.classes_.size == 2
        return self._map(
            X, cb.scores_block, None if binary else self.classes_.size, np.float64, binary=binary
        )

    def predict(self, X):
        """Class labels: argmax of :meth:`predict_proba` (one lazy block map over X).

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDRClassifier
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> clf = CCDRClassifier(n_components=2, n_neighbors=10, random_state=0).fit(X, y)
        >>> clf.predict(X[:3]).tolist(), y[:3].tolist()
        ([0, 0, 0], [0, 0, 0])

        A Dask array in gives a lazy Dask array out:

        >>> import dask.array as da
        >>> pred = clf.predict(da.from_array(X, chunks=60))
        >>> np.array_equal(pred.compute(), clf.predict(X))
        True
        """
        check_is_fitted(self, "head_")
        return self._map(X, cb.predict_block, None, self.classes_.dtype, classes=self.classes_)
