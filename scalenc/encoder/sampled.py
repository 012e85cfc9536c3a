"""The encoder's fit for large n with several kernels (``choice_sample``): the kernel
choice of :mod:`scalenc.encoder.choice` run between the passes of the estimator of
:mod:`scalenc.encoder.estimator`, whose fit calls it after the first pass (which drew
the sample)."""

from __future__ import annotations

from scalenc.base.estimator import fit_stage, unlabeled_marker
from scalenc.encoder import choice
from scalenc.encoder.blocks import linear_embedding_moments
from scalenc.encoder.kernels import Linear
from scalenc.engine.cluster import task_threads
from scalenc.math.labels import encode

__all__ = ["SampledFitMixin"]


class SampledFitMixin:
    """``_fit_on_sample``: the estimator's passes (``_embedding_statistics``,
    ``_cross_entropies``) for the kernels the sample cannot rule out."""

    def _fit_on_sample(self, X, codes, drawn):
        """The kernel choice for large n (:mod:`scalenc.encoder.choice`): the kernels the
        sample shows the rule cannot choose are dropped; the others get their exact
        statistics in pass 2, and with two or more left their cross-entropies over every
        row under the sample's LDAs in the same pass; only those these cannot tell apart
        get their exact cross-entropies in a pass over every row. Returns every kernel's
        embedding statistics (the sample's, scaled, for the kernels dropped)."""
        self._require_all_classes()
        sampled_codes = encode(drawn["labels"], self.classes_, marker=unlabeled_marker(self))
        with fit_stage(self, "sample"):
            screen = choice.sample_choice(
                drawn["rows"],
                sampled_codes,
                self.kernels_,
                self.class_means_,
                self.class_counts_,
                tol=self.tol,
                min_improvement=self.min_improvement,
                threads=min(2, task_threads()[0]),
            )
        if screen is None:  # a class too rare in the sample: every row decides
            z_moments = self._finish_fit(X, codes, None)
            self.fit_plan_["sample"] = "not used: a class has fewer than 10 sampled rows"
            return z_moments
        left = [m for m in range(len(self.kernels_)) if m not in screen.dropped]
        z_moments, self.lda_models_ = list(screen.moments), list(screen.models)
        self._set_cross_entropy(screen.cross_entropy, "sample")
        several = len(left) > 1  # pass 2 also gives c_m under the sample's LDAs
        whiten = [screen.whiten[m] for m in left] if several else None
        if not several and self._linear_from_scatter(self.kernels_[left[0]], X.shape[1]):
            stats, models, loss = self._linear_statistics(X, codes)
        else:
            stats, models, loss = self._embedding_statistics(
                X, codes, [self.kernels_[m] for m in left],
                [screen.models[m] for m in left] if several else None, whiten,
            )  # fmt: skip
        for position, m in enumerate(left):
            z_moments[m], self.lda_models_[m] = stats[position], models[position]
        decided, compared = [], []
        if several:  # bounds on the exact c_m: where they decide, no third pass
            lower, upper = choice.cross_entropy_bounds(
                loss, [screen.models[m] for m in left], models, whiten
            )
            self._set_cross_entropy(lower, "interval", at=left, upper=upper)
            out = choice.excluded_within(
                *self.cross_entropy_bounds_.T, left, min_improvement=self.min_improvement
            )
            undecided = [m for m in left if m not in out]
            decided, compared = (left, []) if len(undecided) == 1 else ([], undecided)
            left = undecided
        if compared:
            exact = self._cross_entropies(
                X, codes, [self.kernels_[m] for m in compared],
                [self.lda_models_[m] for m in compared],
            )  # fmt: skip
            self._set_cross_entropy(exact, at=compared)
        names = [kernel.name for kernel in self.kernels_]
        self.fit_plan_ = {
            "name": "sample",
            "passes_over_X": 3 if compared else 2,
            "sample_rows": screen.rows,
            "dropped_by_sample": [names[m] for m in sorted(screen.dropped)],
            "decided_by_bounds": {
                names[m]: self.cross_entropy_bounds_[m].tolist() for m in decided
            },
            "compared_over_every_row": [names[m] for m in compared],
        }
        index = choice.rule_among(self.cross_entropy_, left, self.min_improvement)
        self._select_kernel(z_moments, index)
        return z_moments

    def _linear_from_scatter(self, kernel, n_features: int) -> bool:
        """Whether the linear kernel left alone gets its statistics from X's p×p scatter
        (:meth:`_linear_statistics`) rather than from Z's K×K moments: where p < K,
        whose p² products per row are fewer than Z's K² (and fewer than ``X Uᵀ``'s K·p),
        and p×p fits in a task (``max_scatter_features``)."""
        return isinstance(kernel, Linear) and n_features < min(
            self.classes_.size, self.max_scatter_features + 1
        )

    def _linear_statistics(self, X, codes):
        """The linear kernel's embedding statistics and LDA from a pass that computes X's
        pooled within-class scatter S_w (p×p): Z = X Uᵀ has class means U Uᵀ and
        scatter U S_w Uᵀ (:func:`~scalenc.encoder.blocks.linear_embedding_moments`, with
        pass 1's U). On 1 M × 16 rows, K = 100, the pass took 0.4 s instead of Z's 1.5 s.
        Their rounding differs from Z's own moments' (a few units of 10⁻¹⁵, relative)."""
        with fit_stage(self, "embedding"):
            moments = self._moments_pass(X, codes, [], scatter=True)
        stats = linear_embedding_moments({**moments, "mean": self.class_means_})
        return [stats], [self._lda(stats)], None
