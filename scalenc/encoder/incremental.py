"""The encoder's ``partial_fit``: new batches of rows merged into the model's running sums
without re-reading earlier batches (exact for the linear kernel alone; with other kernels
each batch is embedded with U as updated by that batch).

A mixin of :class:`~scalenc.encoder.estimator.EncoderClassifier`: it keeps the running
totals between calls in private attributes (``_x_moments_total``, ``_z_totals``,
``_loglik_total``, ``_kernel_specs``, ``_one_pass_mode``, ``_model_ready``), which model
files store, and uses the estimator's fit steps for the statistics.
"""

from __future__ import annotations

import numpy as np

from scalenc.base.estimator import (
    check_classes,
    check_feature_names_of,
    check_n_features,
    unlabeled_marker,
)
from scalenc.encoder import passes as encoder_passes
from scalenc.engine.cluster import compute
from scalenc.engine.reads import counting_passes
from scalenc.exceptions import InputError
from scalenc.io.inputs import check_xy, encode_labels
from scalenc.math import moments as _blocks
from scalenc.math.labels import sorted_classes

__all__ = ["IncrementalFitMixin"]


class IncrementalFitMixin:
    """``partial_fit`` for :class:`~scalenc.encoder.estimator.EncoderClassifier`."""

    def partial_fit(self, X, y, classes=None):
        """Update the model with a new batch of rows, without re-reading earlier batches.

        All statistics are sums, merged exactly with the stored ones. With the linear
        kernel alone and p ≤ ``max_scatter_features`` the result equals ``fit`` on all
        batches together (to rounding). For other kernels Z depends on U, which moves
        as batches arrive: each batch's embedding statistics (and, with several kernels,
        its cross-entropy) are computed with U as updated by that batch, so the model
        approaches ``fit``'s as U settles (Shen's Theorem 1: U converges to E(X|Y)).

        Parameters
        ----------
        X, y : the new batch.
        classes : array-like, required on the first call
            Every class that will ever appear.

        Notes
        -----
        Passes over the batch: 1 (linear, one-pass mode), 2, or 3 (several kernels).
        Until every class has had a labeled row, U is incomplete and Z cannot be formed;
        batches seen until then update U but (for non-linear kernels) not the LDA.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> batches = np.array_split(np.random.default_rng(0).permutation(len(y)), 3)
        >>> model = EncoderClassifier()
        >>> for rows in batches:
        ...     model = model.partial_fit(X[rows], y[rows], classes=[0, 1, 2])
        >>> model.class_counts_
        array([50, 50, 50])

        With the linear kernel alone, the batches give ``fit``'s model on all rows:

        >>> bool(np.allclose(model.coef_, EncoderClassifier().fit(X, y).coef_))
        True
        """
        first = not hasattr(self, "_x_moments_total")
        if first:
            kernels = self._check_params()
            if self.method != "fast":
                raise InputError("partial_fit needs method='fast'; the full method keeps all of X.")
            if classes is None:
                raise InputError(
                    "classes must be passed on the first call to partial_fit, listing every "
                    "class that will ever appear (e.g. classes=np.unique(y_all))."
                )
            classes = sorted_classes(classes)
            check_classes(classes, type(self).__name__, unlabeled_marker(self))
        check_feature_names_of(self, X, reset=first)
        X, y = check_xy(X, y, chunk_rows=self.chunk_rows, estimator=self, require_y=True)
        if first:
            self.classes_ = classes
            self.n_features_in_ = X.shape[1]
            self._kernel_specs = kernels
            self._one_pass_mode = self._one_pass(kernels, X.shape[1])
            self._z_totals = None
            self._loglik_total = 0.0
        else:
            check_n_features(self, X)
            if classes is not None and not np.array_equal(sorted_classes(classes), self.classes_):
                raise InputError(
                    f"classes={list(classes)} differs from the classes of the first "
                    f"partial_fit call {list(self.classes_)}."
                )
        with counting_passes(X) as count:
            self._partial_update(X, y, first)
        self.n_passes_ = count.passes
        return self

    def _partial_update(self, X, y, first):
        """partial_fit's steps on a checked batch: its class moments merged with the
        totals, then (all classes seen) its embedding statistics."""
        codes = encode_labels(y, self.classes_, unlabeled_marker(self))
        batch = self._moments_pass(X, codes, self._kernel_specs, scatter=self._one_pass_mode)
        total = batch if first else _blocks.merge_partials(self._x_moments_total, batch)
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
        (z_batch,) = compute(
            encoder_passes.embedding_moments_pass(
                X, codes, self.kernels_, U, split_every=self.split_every
            )
        )
        prev = self._z_totals
        self._z_totals = (
            list(z_batch)
            if prev is None
            else [_blocks.merge_partials(a, b) for a, b in zip(prev, z_batch)]
        )
        self.lda_models_ = [self._lda(m) for m in self._z_totals]
        if len(self.kernels_) > 1:
            (loglik,) = compute(
                encoder_passes.cross_entropy_pass(
                    X, codes, self.kernels_, U, self.lda_models_, split_every=self.split_every
                )
            )
            self._loglik_total = self._loglik_total + np.array([float(v) for v in loglik])
            self.cross_entropy_ = -self._loglik_total
        else:
            self.cross_entropy_ = np.full(1, np.nan)
        self._select_kernel(self._z_totals)
        self._model_ready = True

    def _refit_from_totals(self, z_moments):
        """The one-pass linear model from the merged totals' embedding statistics."""
        if (self.class_counts_ == 0).any():
            self._model_ready = False
            return
        self.lda_models_ = [self._lda(m) for m in z_moments]
        self.cross_entropy_ = np.full(1, np.nan)  # the one-pass mode has one kernel
        self._select_kernel(z_moments)
        self._model_ready = True
