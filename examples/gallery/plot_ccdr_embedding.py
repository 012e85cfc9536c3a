"""
A CCDR embedding in two dimensions
==================================

:class:`~scalenc.CCDR` (Raich, Costa, Damelin & Hero) embeds the rows in m dimensions by a
Laplacian eigenmap of their k-NN graph in which every labeled row is also pulled towards a
class centre :math:`z_k`. The eigenproblem is solved on a stratified subsample of
``subsample_size`` rows; every other row is placed by the Nyström extension (eq. 20), block
by block. ``beta`` weighs the graph (geometry) term against the class-centre term.

The data is a subset of the Statlog Landsat satellite table (6 classes, 36 features) when
``$SCALENC_DATA_DIR`` holds it, else scikit-learn's digits.
"""

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from scalenc import CCDR, CCDRClassifier


def satimage():
    """2 000 training and 1 000 test rows of satimage (drawn at random: the standard split
    is sorted by class), or scikit-learn's digits."""
    path = Path(os.environ.get("SCALENC_DATA_DIR", "../shared/data")) / "satimage.npz"
    if path.exists():
        with np.load(path) as data:
            X, y = data["X"], data["y"]
            rng = np.random.default_rng(0)
            train = rng.choice(data["train_idx"], 2000, replace=False)
            test = rng.choice(data["test_idx"], 1000, replace=False)
        return X[train], y[train], X[test], y[test], "satimage"
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:1200], y[:1200], X[1200:], y[1200:], "digits"


X_train, y_train, X_test, y_test, name = satimage()

# %%
# The eigenproblem is solved on 1 000 of the training rows; the other training rows and
# all test rows are embedded by the Nyström extension with c = 0 (label unknown).

ccdr = CCDR(n_components=2, beta=0.5, n_neighbors=8, subsample_size=1000, random_state=0)
ccdr.fit(X_train, y_train)
E_test = ccdr.transform(X_test)
print(
    f"eigenvalues {ccdr.eigenvalues_.round(4)}, epsilon {ccdr.epsilon_:.3g}, "
    f"passes over X: {ccdr.n_passes_}"
)

fig, ax = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
sub = ccdr.subsample_indices_
for k in np.unique(y_train):
    ax[0].scatter(*ccdr.embedding_[y_train[sub] == k].T, s=6, label=str(k))
    ax[1].scatter(*E_test[y_test == k].T, s=6)
ax[0].scatter(*ccdr.centers_.T, marker="X", s=120, c="black", label="class centre $z_k$")
ax[0].set(title=f"{name}: subsample (solved)", xlabel="$y(1)$", ylabel="$y(2)$")
ax[1].set(title="held-out rows (Nyström extension)", xlabel="$y(1)$")
ax[0].legend(markerscale=2, fontsize="small")
fig.tight_layout()

# %%
# With six classes (satimage), two coordinates cannot separate them all: the first
# separates the most distinct class from the others, the second orders the rest along a
# line from one class centre to the next. A classifier on the embedding shows what more
# components add: the paper's least-squares classifier on m = 2 and on m = 8 components.

for m in (2, 8):
    clf = CCDRClassifier(n_components=m, n_neighbors=8, subsample_size=1000, random_state=0)
    accuracy = clf.fit(X_train, y_train).score(X_test, y_test)
    print(f"m = {m}: held-out accuracy {accuracy:.3f}")
plt.show()
