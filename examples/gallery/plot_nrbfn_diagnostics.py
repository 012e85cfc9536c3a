"""
nRBFN: the soft-k-NN basis, the fitting error and the spectral risk
===================================================================

:class:`~scalenc.NRBFNClassifier` selects its radial basis by soft k-NN (Hu, Pan & Wu,
Algorithm 1): every training row gets a confidence T, the weight of its k nearest
neighbours that share its label, and the rows with T below the threshold t — the rows near
class boundaries — become the basis. The weights are then a ridge regression of the class
indicators F on the normalised similarities :math:`\\tilde W` to the basis,
:math:`X^* = F\\tilde W^T(\\tilde W\\tilde W^T + \\lambda\\lVert\\tilde W\\rVert_F^2 I)^{-1}`.

Two diagnostics of the paper come with every fit, at no extra pass: the *fitting error*
ε (Definition 7; 1 for a perfect fit) and the *spectral risk* γ (Definition 5; ≥ 1, a
warning of overfitting when large). The ridge weight λ trades one for the other.

The data is the iris table, unscaled, as in the paper.
"""

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.decomposition import PCA

from scalenc import NRBFNClassifier


def iris():
    """Iris from $SCALENC_DATA_DIR, or the identical copy bundled with scikit-learn."""
    path = Path(os.environ.get("SCALENC_DATA_DIR", "../shared/data")) / "iris.npz"
    if path.exists():
        with np.load(path) as data:
            return data["X"], data["y"]
    from sklearn.datasets import load_iris

    return load_iris(return_X_y=True)


X, y = iris()
model = NRBFNClassifier(n_neighbors=20, confidence_threshold=0.9).fit(X, y)
print(
    f"basis: {len(model.basis_indices_)} of {len(y)} rows ({model.basis_fraction_:.1%}), "
    f"sigma = {model.sigma_:.3f}, fitting error = {model.fitting_error_:.3f}, "
    f"spectral risk = {model.spectral_risk_:.1f}, passes over X: {model.n_passes_}"
)

# %%
# The basis in the plane of the first two principal components: the confident rows in the
# middle of each class are left out, the rows where classes meet are kept.

Z = PCA(n_components=2).fit_transform(X)
basis = np.zeros(len(y), dtype=bool)
basis[model.basis_indices_] = True
confidence = np.full(len(y), np.nan)
confidence[model.candidate_indices_] = model.confidence_

fig, ax = plt.subplots(1, 2, figsize=(10, 4))
points = ax[0].scatter(Z[:, 0], Z[:, 1], c=confidence, cmap="viridis", s=18)
ax[0].scatter(
    Z[basis, 0], Z[basis, 1], facecolors="none", edgecolors="red", s=60, label="basis row"
)
ax[0].set(title="soft-k-NN confidence T", xlabel="PC 1", ylabel="PC 2")
ax[0].legend(loc="lower right")
fig.colorbar(points, ax=ax[0])
ax[1].hist(
    [model.confidence_[y[model.candidate_indices_] == k] for k in np.unique(y)],
    bins=20,
    stacked=True,
    label=[f"class {k}" for k in np.unique(y)],
)
ax[1].axvline(0.9, color="red", linestyle="--", label="threshold t = 0.9")
ax[1].set(title="confidence of every row", xlabel="T", ylabel="rows")
ax[1].legend()
fig.tight_layout()

# %%
# Fitting error and spectral risk against λ. A small λ fits the indicators closely
# (ε near 1) with components of small singular value (large γ); a large λ does the
# opposite. Given a grid of λ, one fit cross-validates all of it in the same Gram pass
# (``cv_error_``) and keeps the best.

alphas = np.logspace(-13, -1, 7)
fits = [NRBFNClassifier(alpha=float(a)).fit(X, y) for a in alphas]
searched = NRBFNClassifier(alpha=tuple(alphas), cv=5, random_state=0).fit(X, y)
print(f"λ chosen by 5-fold cross-validation: {searched.alpha_:g}")

fig, ax = plt.subplots(1, 2, figsize=(10, 4))
ax[0].semilogx(alphas, [m.fitting_error_ for m in fits], "o-")
ax[0].set(xlabel="λ", ylabel="fitting error ε", title="the ℓ2 trade-off")
risk = ax[0].twinx()
risk.loglog(alphas, [m.spectral_risk_ for m in fits], "s-", color="tab:red")
risk.set_ylabel("spectral risk γ", color="tab:red")
ax[1].semilogx(alphas, searched.cv_error_ * 100, "o-")
ax[1].axvline(searched.alpha_, color="tab:orange", linestyle="--", label="chosen λ")
ax[1].set(xlabel="λ", ylabel="5-fold CV error (%)", title="held-out error")
ax[1].legend()
fig.tight_layout()
plt.show()
