"""The fitted encoder's outputs, each one lazy block map over X (Dask in, Dask out; NumPy
in, NumPy out): the embedding Z = δ(X, U) of the chosen kernel (``transform``), its LDA
scores, posteriors and labels (Shen's Section 3, Step 5).

A mixin of :class:`~scalenc.encoder.estimator.EncoderClassifier`: the full method's
outputs embed X against the training data the estimator kept (``_full_embedding``), the
others map X's blocks with the class means U.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from sklearn.base import TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from scalenc.base.estimator import known_row_chunks, prepare_input
from scalenc.encoder.blocks import (
    apply_to_embedding,
    decision_block,
    embed_block,
    predict_block,
    proba_block,
)
from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.math.linalg import LDAModel

__all__ = ["EncoderOutputsMixin"]


class EncoderOutputsMixin(TransformerMixin):
    """``transform``, ``decision_function``, ``predict_proba``, ``predict_log_proba`` and
    ``predict`` for :class:`~scalenc.encoder.estimator.EncoderClassifier`.

    A ``TransformerMixin``: scikit-learn wraps ``transform`` for ``set_output`` in the
    class that defines it, this one.
    """

    def _check_fitted(self):
        check_is_fitted(self, "classes_")
        if getattr(self, "_model_ready", True) is False or not hasattr(self, "coef_"):
            self._require_all_classes()
            raise NotFittedError("This EncoderClassifier has no fitted model yet; call fit.")

    def _chosen_model(self) -> LDAModel:
        self._check_fitted()
        return self.lda_models_[self.kernel_index_]

    def _map(self, X, block_fn, n_out, result_dtype, graph=None, **kwargs):
        """One lazy block map over X; ``result_dtype=None`` means X's float dtype. A model
        fitted with a graph, or a ``graph`` given, maps the nodes' embedding instead
        (:meth:`~scalenc.encoder.graph_fit.GraphFitMixin._graph_map`)."""
        self._check_fitted()
        if graph is not None or self._fitted_with_graph:
            return self._graph_map(X, graph, block_fn, n_out, result_dtype, **kwargs)
        Xd, is_dask = prepare_input(self, X)
        if result_dtype is None:
            result_dtype = kwargs["out_dtype"] = Xd.dtype
        if self.method == "full":
            Z = self._full_embedding(known_row_chunks(Xd), self.kernel_)
            out = passes.map_rows(
                apply_to_embedding, Z, n_out, result_dtype, block_fn=block_fn, **kwargs
            )
        else:
            out = passes.map_rows(
                block_fn,
                Xd,
                n_out,
                result_dtype,
                kernel=self.kernel_,
                U=self.class_means_,
                **kwargs,
            )
        if is_dask:
            return out
        (result,) = compute(out)
        return result

    def transform(self, X, graph=None):
        """The embedding Z = δ(X, U) of the chosen kernel, shape (n, K) (one lazy block map).

        With a model fitted with a graph, pass the nodes' graph as ``graph`` (X None for
        a graph alone): the chosen embedding of every node, shape (n, its width).

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = EncoderClassifier().fit(X, y)
        >>> Z = model.transform(X[:5])
        >>> Z.shape
        (5, 3)

        Here the linear kernel was chosen, whose embedding is X Uᵀ, U the class means:

        >>> model.kernel_.name
        'linear'
        >>> import numpy as np
        >>> bool(np.allclose(Z, X[:5] @ model.class_means_.T))
        True
        """
        self._check_fitted()
        return self._map(X, embed_block, self._n_features_out, None, graph=graph)

    def decision_function(self, X, graph=None):
        """LDA scores of Z, shape (n, K); (n,) for two classes, as scikit-learn's LDA.
        ``graph``: as for :meth:`transform`.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = EncoderClassifier().fit(X, y)
        >>> scores = model.decision_function(X[[0, 50, 100]])
        >>> scores.shape, scores.argmax(axis=1)
        ((3, 3), array([0, 1, 2]))

        Two classes give one score per row, positive for ``classes_[1]``:

        >>> binary = EncoderClassifier(kernels=("linear",)).fit(X[:100], y[:100])
        >>> binary.decision_function(X[[0, 99]]) > 0
        array([False,  True])
        """
        self._check_fitted()
        n_out = 1 if self.classes_.size == 2 else self.classes_.size
        out = self._map(
            X,
            decision_block,
            n_out,
            np.float64,
            graph=graph,
            model=self._chosen_model(),
            out_dtype=np.float64,
        )
        return out[:, 0] if n_out == 1 else out

    def predict_proba(self, X, graph=None):
        """LDA posteriors T of Z, shape (n, K); rows sum to one. ``graph``: as for
        :meth:`transform`.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = EncoderClassifier().fit(X, y)
        >>> proba = model.predict_proba(X[[0, 50, 100]])
        >>> proba.shape, proba.sum(axis=1).round(6)
        ((3, 3), array([1., 1., 1.]))
        >>> proba.argmax(axis=1)
        array([0, 1, 2])
        """
        self._check_fitted()
        return self._map(
            X,
            proba_block,
            self.classes_.size,
            np.float64,
            graph=graph,
            model=self._chosen_model(),
            out_dtype=np.float64,
        )

    def predict_log_proba(self, X, graph=None):
        """Log of :meth:`predict_proba`.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = EncoderClassifier().fit(X, y)
        >>> import numpy as np
        >>> log_proba = model.predict_log_proba(X[:3])
        >>> bool(np.allclose(np.exp(log_proba), model.predict_proba(X[:3])))
        True
        """
        proba = self.predict_proba(X, graph=graph)
        return da.log(proba) if isinstance(proba, da.Array) else np.log(proba)

    def predict(self, X, graph=None):
        """Class labels (one lazy block map over X). ``graph``: as for :meth:`transform`;
        with the training graph, every node is predicted, the unlabeled ones included.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = EncoderClassifier().fit(X, y)
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
        self._check_fitted()
        return self._map(
            X,
            predict_block,
            None,
            self.classes_.dtype,
            graph=graph,
            model=self._chosen_model(),
            classes=self.classes_,
        )
