"""Section 2's full method of the encoder (``method="full"``): the embedding Z = A W of X
against every training row, computed block × block (O(n²p) time), for the estimator of
:mod:`scalenc.encoder.estimator`, whose fit calls it after the first pass."""

from __future__ import annotations

import dask.array as da
import numpy as np

from scalenc.encoder import passes as encoder_passes
from scalenc.engine.cluster import compute

__all__ = ["FullMethodMixin"]


class FullMethodMixin:
    """The full method's fit and embedding (the training data kept as ``_X_fit``)."""

    def _fit_full(self, X, codes, kernels, moments):
        """The full method after the first pass (class moments in ``moments``)."""
        self._set_class_stats(moments, kernels, one_pass=False)
        self._require_all_classes()
        self.fit_plan_ = {"name": "full", "passes_over_X": 3 if len(self.kernels_) > 1 else 2}
        self._X_fit = X
        self._codes_fit = codes
        embeddings = [self._full_embedding(X, kernel) for kernel in self.kernels_]
        K = self.classes_.size
        stats = [encoder_passes.moments_pass(Z, codes, K) for Z in embeddings]
        z_moments = list(compute(*stats))
        self.lda_models_ = [self._lda(m) for m in z_moments]
        self._set_cross_entropy()
        if len(self.kernels_) > 1:
            logliks = [
                encoder_passes.log_likelihood_pass(Z, codes, model)
                for Z, model in zip(embeddings, self.lda_models_)
            ]
            self._set_cross_entropy(-np.array([float(v) for v in compute(*logliks)]))
        self._select_kernel(z_moments)

    def _full_embedding(self, X, kernel) -> da.Array:
        """Z = A W of X against the training data kept by ``fit`` (Section 2)."""
        return encoder_passes.full_embedding(
            X,
            self._X_fit,
            self._codes_fit,
            kernel,
            self.class_counts_,
        )
