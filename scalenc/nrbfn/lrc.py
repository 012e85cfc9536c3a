""":class:`LRClassifier`: Hu, Pan & Wu's linear regression classifier, F̂ = F Ãᵀ(ÃÃᵀ + λI)⁻¹Ã
from one pass of class moments.
"""

from __future__ import annotations

import numpy as np

from scalenc.base.estimator import (
    fit_streaming,
    memory_budget,
    refuse_nonfinite,
    update_streaming,
)
from scalenc.base.validation import (
    CHECKPOINT_CONSTRAINTS,
    TABLE_CONSTRAINTS,
    Integral,
    Interval,
    Real,
    document_table_parameters,
)
from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.engine.memory import format_bytes
from scalenc.engine.reduce import fan_in
from scalenc.exceptions import MemoryBudgetError
from scalenc.math.linalg import (
    MAX_RANK_BASIS,
    numerical_rank,
    regression_diagnostics,
    ridge_solve,
    warn_singular,
)
from scalenc.math.moments import merge_partials
from scalenc.nrbfn import blocks as nb
from scalenc.nrbfn.regression import _RegressionClassifier

__all__ = [
    "LRClassifier",
    "lrc_memory",
]


# --- LRC ------------------------------------------------------------------------------------


@document_table_parameters
class LRClassifier(_RegressionClassifier):
    """Regularised linear regression classifier (Hu, Pan & Wu, eqs. 1 and 14), one pass.

    Ridge regression of the class indicators F on the augmented data
    Ã = [√β 1ᵀ; A], A = the labeled training rows with their mean removed:
    D* = F Ãᵀ (ÃÃᵀ + λ‖Ã‖²_F I)⁻¹, and a row b is classified by argmax_k (D* b̃)_k,
    b̃ = [√β; b − x̄].

    Parameters
    ----------
    alpha : float ≥ 0, default=1e-4
        λ, relative to ‖Ã‖²_F (λ' = λ‖Ã‖²_F).
    beta : float > 0, default=1.0
        β of the augmentation (the paper uses β = 1 in practice).
    unlabeled : int, float, str or None, default=-1
        The label that marks an unlabeled row, as in :mod:`sklearn.semi_supervised`: such
        rows (and rows labeled None or NaN) never enter a class statistic. ``None``
        for fully supervised data: then ``-1`` is an ordinary class and None/NaN labels are
        refused.
    {table parameters}
    chunk_rows : int or None, default=None
        Rows per block for NumPy input (None: equal blocks of at most about 64 MB, as many
        as a multiple of the cores).
        Dask input keeps its chunks unless this is set.
    split_every : int or None, default=None
        Fan-in of the tree reduction that sums the blocks' normal equations; None: Dask's
        configuration ``scalenc.split-every`` (8 unless set;
        :func:`scalenc.engine.reduce.fan_in`).
    memory_limit : int, str or None, default=None
        Bytes the fit may use in one process (an int, or a string such as ``"4GB"``), as
        for :class:`~scalenc.NRBFNClassifier`. None: what a worker of the active
        distributed client can add before Dask pauses it, else (and for the client's
        solve) a quarter of the memory the machine has available. The p×p scatter of
        each block and the (p+1)×(p+1) solve are estimated before the pass
        (:func:`lrc_memory`); a fit that would not fit raises
        :class:`~scalenc.exceptions.MemoryBudgetError` saying what to change.
    {checkpoint parameter}

    Attributes
    ----------
    classes_, n_features_in_
    mean_ : ndarray (p,)
        x̄, the mean of the labeled training rows.
    weights_ : ndarray (K, p + 1)
        D*, first column for the √β row.
    coef_ : ndarray (K, p)
        With ``intercept_``, the same model as ``scores = X @ coef_.T + intercept_``.
    intercept_ : ndarray (K,)
    fitting_error_, spectral_risk_ : float
        ε (Definition 7) and γ (Definition 5) of the training fit.
    rank_ : int or None
        Numerical rank of Ã; None when p + 1 exceeds :data:`MAX_RANK_BASIS`.
    n_passes_ : int
        1 (``partial_fit``: 1 over the new batch).
    n_updates_ : int
        ``partial_fit`` updates since ``fit`` (0 after ``fit``).

    Notes
    -----
    One pass over X accumulates the class counts, class means and pooled within-class
    scatter (Chan et al.'s pairwise merge, no cancellation); ÃÃᵀ and FÃᵀ follow exactly:
    ÃÃᵀ = diag(βn, S_w + Σ_k n_k (μ_k − x̄)(μ_k − x̄)ᵀ), FÃᵀ = [√β n_k, n_k (μ_k − x̄)].
    Memory per task: one block plus O(p² + K p) (a merge of the tree holds
    ``split_every`` + 1 of the p×p scatters); the client's solve holds a few
    (p+1)×(p+1) float64 matrices (:func:`lrc_memory`).

    The class moments are kept (and saved in model files, O(K p + p²)), so
    :meth:`partial_fit` updates the model with new rows exactly: the same model as ``fit``
    on all rows, to rounding.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LRClassifier().fit(X, y)
    >>> model.n_passes_, model.coef_.shape
    (1, (3, 4))
    >>> round(model.fitting_error_, 3), round(model.spectral_risk_, 2)
    (1.369, 9.67)
    >>> float(model.score(X, y)) > 0.8
    True
    """

    def __init__(
        self,
        alpha=1e-4,
        *,
        beta=1.0,
        unlabeled=-1,
        categorical="onehot",
        handle_unknown="error",
        handle_missing="error",
        chunk_rows=None,
        split_every=None,
        memory_limit=None,
        checkpoint=None,
    ):
        self.alpha = alpha
        self.beta = beta
        self.unlabeled = unlabeled
        self.categorical = categorical
        self.handle_unknown = handle_unknown
        self.handle_missing = handle_missing
        self.chunk_rows = chunk_rows
        self.split_every = split_every
        self.memory_limit = memory_limit
        self.checkpoint = checkpoint

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0.0, None, closed="left")],
        "beta": [Interval(Real, 0.0, None, closed="neither")],
        "unlabeled": [Real, str, None],
        **TABLE_CONSTRAINTS,
        **CHECKPOINT_CONSTRAINTS,
        "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
        "split_every": [Interval(Integral, 2, None, closed="left"), None],
        "memory_limit": [Interval(Integral, 1, None, closed="left"), str, None],
    }

    def fit(self, X, y):
        """Fit from (X, y) in one pass; rows labeled −1/None/NaN are ignored.

        Returns
        -------
        self

        Examples
        --------
        >>> import dask.array as da
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import LRClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = LRClassifier().fit(da.from_array(X, chunks=50), y)
        >>> model.n_passes_, model.weights_.shape  # D*: a column for √β, one per feature
        (1, (3, 5))
        >>> float(model.score(X, y)) > 0.8
        True
        """
        return fit_streaming(self, X, y)

    def _check_params(self) -> None:
        self._validate_params()

    def _fit(self, X, codes, params):
        """One pass of class moments, then ÃÃᵀ, FÃᵀ and the ridge solve."""
        self._check_memory(X)
        (moments,) = compute(passes.class_moments_pass(X, codes, self.classes_.size, scatter=True))
        refuse_nonfinite(moments["nonfinite"])
        self._from_moments(moments)

    #: the statistics :meth:`partial_fit` extends
    _statistics = "_moments_total"

    def partial_fit(self, X, y, classes=None):
        """Update the model with a new batch of rows, reading only the batch.

        The class moments of the batch (one pass) are merged with the model's (Chan et
        al.'s pairwise merge) and the normal equations solved again: exactly the model of
        ``fit`` on every row seen, to rounding. On a model not fitted yet, the first call
        is ``fit`` on the batch, which must hold labeled rows of every class.

        Parameters
        ----------
        X, y : the new batch (y: ``unlabeled`` marks rows left out).
        classes : array-like, optional
            Every class; checked against the model's (an update cannot add a class).

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import LRClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> old, new = np.arange(150) % 3 != 0, np.arange(150) % 3 == 0
        >>> model = LRClassifier().fit(X[old], y[old]).partial_fit(X[new], y[new])
        >>> model.n_passes_, model.n_updates_
        (1, 1)
        >>> bool(np.allclose(model.coef_, LRClassifier().fit(X, y).coef_, rtol=1e-10))
        True
        """
        return update_streaming(self, X, y, classes)

    def _update(self, X, codes):
        """One pass of the batch's class moments, merged with the model's, and the solve."""
        self._check_memory(X)
        (batch,) = compute(passes.class_moments_pass(X, codes, self.classes_.size, scatter=True))
        refuse_nonfinite(batch["nonfinite"])
        self._from_moments(merge_partials(self._moments_total, batch))

    def _check_memory(self, X):
        """Refuse, before X is read, p×p statistics the budget cannot hold."""
        budget, source = memory_budget(self)
        held = min(fan_in(), len(X.chunks[0])) + 1  # a merge's partials and sum
        need = lrc_memory(X.shape[1], max(X.chunks[0]), X.dtype.itemsize, held)
        if need["worker"] <= budget["worker"] and need["client"] <= budget["client"]:
            return
        p = X.shape[1]
        where = "worker" if need["worker"] > budget["worker"] else "client"
        raise MemoryBudgetError(
            f"{type(self).__name__} on {p} features holds (p+1)×(p+1) float64 matrices of "
            f"{format_bytes(need['square'])} each: about {format_bytes(need['worker'])} per "
            f"worker (a row block and {held} p×p scatters: a merge of the blocks' partials, "
            f"split_every={fan_in()}) and {format_bytes(need['client'])} on the "
            f"client (the scatter, ÃÃᵀ and its Cholesky factor, with their temporaries), "
            f"more than the {where}'s memory budget of {format_bytes(budget[where])} "
            f"({source}). Reduce the features first (e.g. sklearn.decomposition.PCA, or "
            "feature selection), lower split_every, or raise memory_limit."
        )

    def _from_moments(self, moments):
        self._moments_total = moments
        self.mean_, gram, cross = _normal_equations(moments, self.beta)
        self._solve(gram, cross, moments["n"].sum())

    def _solve(self, gram, cross, n_rows):
        self.weights_, problem = ridge_solve(gram, cross, self.alpha)
        if problem:
            warn_singular(type(self).__name__, self.alpha, problem)
        diag = regression_diagnostics(gram, cross, self.weights_, n_rows)
        self.fitting_error_ = diag["fitting_error"]
        self.spectral_risk_ = diag["spectral_risk"]
        self.rank_ = numerical_rank(gram) if gram.shape[0] <= MAX_RANK_BASIS else None
        self.coef_ = self.weights_[:, 1:]
        self.intercept_ = np.sqrt(self.beta) * self.weights_[:, 0] - self.coef_ @ self.mean_

    def _score_kwargs(self):
        return {"score_fn": nb.lrc_scores, "coef": self.coef_, "intercept": self.intercept_}


def lrc_memory(p: int, block_rows: int, itemsize: int, held: int) -> dict:
    """Peak bytes of an LRC fit on p features: ``square``, one (p+1)×(p+1) float64 matrix;
    ``worker``, a block of ``block_rows`` rows with ``held`` p×p scatters (a merge of the
    tree: up to ``split_every`` partials and their sum); ``client``, five such matrices
    (the merged scatter, ÃÃᵀ, the solve's triangle copy and the temporaries of ÃÃᵀ's
    build).

    Examples
    --------
    >>> from scalenc.nrbfn.lrc import lrc_memory
    >>> need = lrc_memory(50_000, 20, 4, 2)  # 20 rows of 50 000 float32 features
    >>> round(need["square"] / 2**30, 1), round(need["client"] / 2**30)
    (18.6, 93)
    """
    square = 8 * (p + 1) ** 2
    return {
        "square": square,
        "worker": block_rows * p * itemsize + held * square,
        "client": 5 * square,
    }


def _normal_equations(moments: dict, beta: float) -> tuple[np.ndarray, ...]:
    """The linear regression classifier's normal equations from class moments (one pass).

    With Ã the centred rows augmented by √β (Hu, Pan & Wu's bias row) and F the class
    indicators: returns the mean x̄ (p,), ÃÃᵀ ((p+1)×(p+1): β·n in the corner, the total
    scatter about x̄ in the rest) and FÃᵀ (K×(p+1): √β·n_k, then n_k (μ_k − x̄)).
    """
    counts, means = moments["n"], moments["mean"]
    total = counts.sum()
    mean = counts @ means / total
    centred = means - mean
    scatter = moments["scatter"] + (centred * counts[:, None]).T @ centred
    p = means.shape[1]
    gram = np.zeros((p + 1, p + 1))
    gram[0, 0] = beta * total
    gram[1:, 1:] = (scatter + scatter.T) / 2.0
    cross = np.hstack([np.sqrt(beta) * counts[:, None], counts[:, None] * centred])
    return mean, gram, cross
