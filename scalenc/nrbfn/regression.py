"""What nRBFN and LRC share: the regression classifier's outputs (decision scores,
probabilities, predictions) as lazy block maps of the fitted scores.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from scalenc.base.estimator import (
    StreamingClassifierMixin,
    map_output,
)
from scalenc.nrbfn import blocks as nb

# --- shared estimator plumbing -----------------------------------------------------------


class _RegressionClassifier(StreamingClassifierMixin, ClassifierMixin, BaseEstimator):
    """Validation, class handling and block-wise prediction shared by nRBFN and LRC."""

    def _score_kwargs(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _map(self, X, block_fn, n_out, dtype, **kwargs):
        check_is_fitted(self, "classes_")
        return map_output(self, X, block_fn, n_out, dtype, **self._score_kwargs(), **kwargs)

    def decision_function(self, X):
        """F̂ᵀ, shape (n, K): the regression's estimate of the class indicators.

        For two classes, shape (n,) with F̂₂ − F̂₁ (scikit-learn's binary convention:
        positive means ``classes_[1]``). One lazy block map over X; dtype follows X.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import NRBFNClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = NRBFNClassifier().fit(X, y)  # the same for LRClassifier
        >>> scores = model.decision_function(X[[0, 50, 100]])
        >>> scores.shape, scores.argmax(axis=1)
        ((3, 3), array([0, 1, 2]))
        >>> NRBFNClassifier().fit(X[:100], y[:100]).decision_function(X[[0, 99]]) > 0
        array([False,  True])

        LRClassifier's scores are the linear model ``X coef_ᵀ + intercept_``:

        >>> import numpy as np
        >>> from scalenc import LRClassifier
        >>> lrc = LRClassifier().fit(X, y)
        >>> bool(np.allclose(lrc.decision_function(X), X @ lrc.coef_.T + lrc.intercept_))
        True
        """
        check_is_fitted(self, "classes_")
        binary = self.classes_.size == 2
        out = self._map(
            X,
            nb.decision_block,
            1 if binary else self.classes_.size,
            None,
            out_dtype=None,
            binary=binary,
        )
        return out[:, 0] if binary else out

    def predict_proba(self, X):
        """F̂ᵀ clipped at zero and renormalised per row
        (:func:`~scalenc.nrbfn.blocks.scores_to_proba`).

        Rows sum to one and the argmax is the prediction. These are not calibrated
        posteriors: F̂ is a least-squares fit to the class indicators.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import NRBFNClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = NRBFNClassifier().fit(X, y)  # the same for LRClassifier
        >>> proba = model.predict_proba(X[[0, 50, 100]])
        >>> proba.sum(axis=1).round(6), proba.argmax(axis=1)
        (array([1., 1., 1.]), array([0, 1, 2]))
        >>> bool((proba >= 0).all())
        True
        """
        check_is_fitted(self, "classes_")
        return self._map(X, nb.proba_block, self.classes_.size, None, out_dtype=None)

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba` (−inf where the probability is 0).

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import NRBFNClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = NRBFNClassifier().fit(X, y)  # the same for LRClassifier
        >>> import numpy as np
        >>> log_proba = model.predict_log_proba(X[:3])
        >>> bool(np.allclose(np.exp(log_proba), model.predict_proba(X[:3])))
        True
        """
        proba = self.predict_proba(X)
        with np.errstate(divide="ignore"):
            return da.log(proba) if isinstance(proba, da.Array) else np.log(proba)

    def predict(self, X):
        """Class labels, argmax_k F̂_k (Algorithm 3 step 6; eq. 2 for LRC). One lazy block map.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import NRBFNClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = NRBFNClassifier().fit(X, y)  # the same for LRClassifier
        >>> model.predict(X[[0, 50, 100]])
        array([0, 1, 2])

        A Dask array gives a lazy Dask array, computed block by block:

        >>> import dask.array as da
        >>> labels = model.predict(da.from_array(X, chunks=50))
        >>> labels.chunks
        ((50, 50, 50),)
        >>> bool((labels.compute() == model.predict(X)).all())
        True
        """
        check_is_fitted(self, "classes_")
        return self._map(X, nb.predict_block, None, self.classes_.dtype, classes=self.classes_)
