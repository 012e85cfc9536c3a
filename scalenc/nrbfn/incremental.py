"""nRBFN's ``partial_fit``: a batch's ΦᵀΦ and ΦᵀY (one pass) added to the network's, and
the weights solved again, with the basis G and the width σ as ``fit`` chose them.

A mixin of :class:`~scalenc.nrbfn.estimator.NRBFNClassifier`. ``partial_fit`` is
:func:`scalenc.base.estimator.update_streaming`, as every estimator's: it checks and
encodes the batch, counts ``n_passes_`` and ``n_updates_``, and calls :meth:`_update`.
The statistics an update extends (``_gram_total``) are those ``fit`` keeps
(``keep_statistics``); without them the error says why (``_no_statistics_reason``).
"""

from __future__ import annotations

import numpy as np

from scalenc.base.estimator import fit_stage, update_streaming
from scalenc.engine.cluster import compute
from scalenc.math.linalg import ridge_solve
from scalenc.nrbfn import passes as nrbfn_passes

__all__ = ["NetworkUpdatesMixin"]


class NetworkUpdatesMixin:
    """``partial_fit`` for :class:`~scalenc.nrbfn.estimator.NRBFNClassifier`."""

    #: the statistics :meth:`partial_fit` extends
    _statistics = "_gram_total"

    def partial_fit(self, X, y, classes=None):
        """Update the network with a new batch of rows, reading only the batch.

        The basis G and the width σ stay as ``fit`` chose them; the batch's ΦᵀΦ and ΦᵀY
        (one pass) are added to the model's and the weights solved again. With a fixed λ
        this is exactly the network that the normal equations of every row seen give for
        that basis and σ; what an update cannot do is choose the basis again (rows of a
        new region of the data get no basis row of their own: refit when the data
        drift). With several λ (``alpha="cv"`` or a sequence), λ is chosen again by the
        error on the batch of each λ's weights solved before the batch was added (the
        batch is held out from them): one more pass over the batch. On a model not fitted
        yet, the first call is ``fit`` on the batch. Needs the statistics that ``fit``
        keeps (``keep_statistics``).

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
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import NRBFNClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> old, new = np.arange(150) % 3 != 0, np.arange(150) % 3 == 0
        >>> model = NRBFNClassifier(n_basis=20, alpha=1e-13, random_state=0)
        >>> model = model.fit(X[old], y[old])
        >>> model = model.partial_fit(X[new], y[new])
        >>> model.n_passes_, model.n_updates_, model.basis_.shape
        (1, 1, (20, 4))
        >>> float(model.score(X, y)) > 0.9
        True
        """
        return update_streaming(self, X, y, classes)

    def _update(self, X, codes):
        """The batch's ΦᵀΦ and ΦᵀY added to the model's; λ chosen again on the batch
        where there are several; the solve."""
        grid = self._alpha_grid()
        total = self._gram_total
        errors = None
        if len(grid) > 1:  # each λ's weights before the batch, scored on the batch
            weights = np.stack([ridge_solve(total["M"][0], total["B"][0], lam)[0] for lam in grid])
            with fit_stage(self, "cv"):
                ((errors,),) = compute(
                    nrbfn_passes.cv_error_pass(
                        X, codes, self.basis_, ((self.sigma_, self._normalized()),),
                        weights[None, None], 0,
                    )
                )  # fmt: skip
        with fit_stage(self, "gram"):
            (gram,) = compute(
                nrbfn_passes.gram_pass(
                    X, codes, self.basis_, ((self.sigma_, self._normalized()),),
                    self.classes_.size,
                )
            )  # fmt: skip
        gram = {"M": gram["M"][0], "B": gram["B"][0], "count": gram["count"]}
        merged = {key: total[key] + gram[key] for key in ("M", "B", "count")}
        if errors is not None:
            n_batch = max(int(gram["count"].sum()), 1)
            self.alpha_, self.cv_error_ = grid[int(np.argmin(errors))], errors / n_batch
        with fit_stage(self, "solve"):
            self._solve(merged, self.alpha_)

    def _no_statistics_reason(self) -> str:
        r = self.basis_.shape[0]
        return (
            f"with keep_statistics={self.keep_statistics!r} and a basis of {r} rows, whose "
            f"ΦᵀΦ of {8 * r * r / 2**20:.0f} MiB was not kept; fit with keep_statistics=True "
            "to update it later"
        )
