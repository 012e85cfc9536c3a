"""The encoder's ``partial_fit``: new batches of rows merged into the model's running sums
without re-reading earlier batches (exact for the linear kernel alone; with other kernels
each batch is embedded with U as updated by that batch).

A mixin of :class:`~scalenc.encoder.estimator.EncoderClassifier`. ``partial_fit`` is
:func:`scalenc.base.estimator.update_streaming`, as every estimator's: it checks and
encodes the batch (a table's columns as ``fit`` encodes them), counts ``n_passes_`` and
``n_updates_``, and calls this module's two steps: ``_start_updates`` (the hook that lets
the first call start from the declared classes, with empty sums, where the other
estimators fit the first batch) and ``_update`` (one batch merged). The running totals
live in private attributes (``_x_moments_total``, ``_z_totals``, ``_loglik_total``,
``_kernel_specs``, ``_one_pass_mode``, ``_model_ready``), which model files store.
"""

from __future__ import annotations

import numpy as np

from scalenc.base.estimator import update_streaming
from scalenc.encoder import passes as encoder_passes
from scalenc.engine.cluster import compute
from scalenc.exceptions import InputError
from scalenc.math.moments import merge_partials

__all__ = ["IncrementalFitMixin"]


class IncrementalFitMixin:
    """``partial_fit`` for :class:`~scalenc.encoder.estimator.EncoderClassifier`."""

    #: the statistics :meth:`partial_fit` extends
    _statistics = "_x_moments_total"

    def partial_fit(self, X, y, classes=None):
        """Update the model with a new batch of rows, without re-reading earlier batches.

        All statistics are sums, merged exactly with the stored ones. With the linear
        kernel alone and p ≤ ``max_scatter_features`` the result equals ``fit`` on all
        batches together (to rounding). For other kernels Z depends on U, which moves
        as batches arrive: each batch's embedding statistics (and, with several kernels,
        its cross-entropy) are computed with U as updated by that batch, so the model
        approaches ``fit``'s as U settles (Shen's Theorem 1: U converges to E(X|Y)).
        A table's string, categorical and boolean columns are encoded as ``fit`` encodes
        them: by the first call (its categories), or by the model's ``fit``.

        Parameters
        ----------
        X, y : the new batch.
        classes : array-like, required on the first call
            Every class that will ever appear; on later calls, checked against the
            model's (an update cannot add a class).

        Returns
        -------
        self

        Notes
        -----
        Passes over the batch: 1 (linear, one-pass mode), 2, or 3 (several kernels).
        Until every class has had a labeled row, U is incomplete and Z cannot be formed;
        batches seen until then update U but (for non-linear kernels) not the LDA.
        Unlike the other estimators' ``partial_fit``, the first call on a model not
        fitted yet does not need rows of every class: it starts the sums from
        ``classes``. ``n_updates_`` counts the calls after the first (or after ``fit``).

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> batches = np.array_split(np.random.default_rng(0).permutation(len(y)), 3)
        >>> model = EncoderClassifier(kernels=("linear",))
        >>> for rows in batches:
        ...     model = model.partial_fit(X[rows], y[rows], classes=[0, 1, 2])
        >>> model.class_counts_, model.n_passes_, model.n_updates_
        (array([50, 50, 50]), 1, 2)

        With the linear kernel alone, the batches give ``fit``'s model on all rows:

        >>> linear = EncoderClassifier(kernels=("linear",)).fit(X, y)
        >>> bool(np.allclose(model.coef_, linear.coef_))
        True
        """
        return update_streaming(self, X, y, classes)

    def _start_updates(self, kernels):
        """:func:`~scalenc.base.estimator.update_streaming`'s hook for a first call on a
        model not fitted: empty sums (the first batch's width fixes the one-pass mode)."""
        if self.method != "fast":
            raise InputError("partial_fit needs method='fast'; the full method keeps all of X.")
        self._kernel_specs = kernels
        self._one_pass_mode = None
        self._x_moments_total = None
        self._z_totals = None
        self._loglik_total = 0.0

    def _no_statistics_reason(self) -> str:
        if self.method == "full":
            return "with method='full', which keeps the training X rather than sums"
        if getattr(self, "_graph_codes", None) is not None:
            return "with a graph, whose embedding needs every node's edges again"
        return "by a scalenc that did not keep them"

    def _update(self, X, codes):
        """One batch: its class moments merged with the totals, then (all classes seen)
        its embedding statistics."""
        first = self._x_moments_total is None
        if first:
            self._one_pass_mode = self._one_pass(self._kernel_specs, X.shape[1])
        batch = self._moments_pass(X, codes, self._kernel_specs, scatter=self._one_pass_mode)
        total = batch if first else merge_partials(self._x_moments_total, batch)
        self._x_moments_total = total
        resolve = not hasattr(self, "kernels_") or (self.class_counts_ == 0).any()
        z_moments = self._set_class_stats(
            total, self._kernel_specs, self._one_pass_mode, resolve=resolve
        )
        if self._one_pass_mode:
            self._refit_from_totals(z_moments)
        elif (self.class_counts_ == 0).any():
            self._model_ready = False  # wait for rows of every class before fitting LDA
        else:
            self._partial_embedding_update(X, codes)

    def _partial_embedding_update(self, X, codes):
        U = self.class_means_
        (z_batch,) = compute(encoder_passes.embedding_moments_pass(X, codes, self.kernels_, U))
        prev = self._z_totals
        self._z_totals = (
            list(z_batch) if prev is None else [merge_partials(a, b) for a, b in zip(prev, z_batch)]
        )
        self.lda_models_ = [self._lda(m) for m in self._z_totals]
        if len(self.kernels_) > 1:
            (loglik,) = compute(
                encoder_passes.cross_entropy_pass(X, codes, self.kernels_, U, self.lda_models_)
            )
            self._loglik_total = self._loglik_total + np.array([float(v) for v in loglik])
            self._set_cross_entropy(-self._loglik_total, "running")
        else:
            self._set_cross_entropy()
        self._select_kernel(self._z_totals)
        self._model_ready = True

    def _refit_from_totals(self, z_moments):
        """The one-pass linear model from the merged totals' embedding statistics."""
        if (self.class_counts_ == 0).any():
            self._model_ready = False
            return
        self.lda_models_ = [self._lda(m) for m in z_moments]
        self._set_cross_entropy()  # the one-pass mode has one kernel
        self._select_kernel(z_moments)
        self._model_ready = True
