"""The formulas of CCDR (Raich, Costa, Damelin & Hero) — no dask here.

Paper: ``shared/seeds/ccdr.txt``. Symbols follow it:

* heat-kernel weights on the symmetric k-NN graph of the subsample S (Section II-B3),
  ``w_ij = exp(−‖x_i − x_j‖²/ε)`` if i is among j's k nearest neighbours or j among i's;
* the (L+s)×(L+s) matrix ``G = [[0, C], [Cᵀ, βW]]`` with the L×s class-membership
  matrix C (``c_ki = 1`` iff row i has label k; unlabeled rows have a zero column),
  ``D = diag(G 1)`` and ``L = D − G`` (Section IV);
* the generalised eigenproblem ``L u = λ D u`` (eq. 15), whose eigenvectors
  ``u_2 … u_{m+1}`` hold the class centres z_k (first L rows) and the embedding y_i (last s),
  solved by :func:`scalenc.math.linalg.graph_eigenvectors`;
* the Nyström out-of-sample extension (eq. 20)::

      f_l(x, c) = 1/(1 − λ_l) · (I(c≠0) z_c(l) + β Σ_j K(x, x_j) y_j(l))
                                 / (I(c≠0)      + β Σ_j K(x, x_j)),

  with ``c = 0`` (here: code −1) for an unknown label;
* several subsamples aligned by orthogonal Procrustes (:func:`scalenc.math.linalg.procrustes`).

The block functions of the Nyström map and of the classifier statistics, and the
classifier heads on the embedding (the paper's least-squares "linear", k-NN, LDA), are
here too; the subsample draw is :mod:`scalenc.math.sampling`'s, and :mod:`scalenc.engine.passes`
wires the block functions into passes.

The solve on the subsample (the graph, the eigenproblem, the alignment) runs on the driver
in NumPy/SciPy. The Nyström map, the outputs and the heads also take a device block
(CuPy's: :mod:`scalenc.math.xp`): the solution's and the heads' small arrays go to its
device, and the embedding, the outputs and the statistics are computed there.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from scalenc.exceptions import GraphWarning, InputError
from scalenc.math.distances import ranking_dtype, row_sq_norms
from scalenc.math.linalg import graph_eigenvectors, lda_from_moments, lda_log_proba, procrustes
from scalenc.math.moments import check_finite, class_moments
from scalenc.math.neighbors import nearest
from scalenc.math.softmax import log_softmax
from scalenc.math.xp import as_block, device_of, dtype_in, like, namespace, take_classes, to_host

__all__ = [
    "CCDRSolution",
    "knn_search",
    "intrinsic_dimension",
    "auto_components",
    "heat_kernel_graph",
    "ccdr_matrix",
    "solve_ccdr",
    "nystrom",
    "nystrom_ensemble",
    "align",
    "transform_block",
    "predict_block",
    "proba_block",
    "scores_block",
    "linear_stats_block",
    "lda_stats_block",
    "LinearHead",
    "LDAHead",
    "KNNHead",
]


# --- k nearest neighbours -----------------------------------------------------------------


def knn_search(X: np.ndarray, S: np.ndarray, k: int, *, exclude_self: bool = False):
    """The k nearest rows of S for each row of X: (indices (b, k), squared distances (b, k)).

    Sorted by distance, ties by index: the neighbours and their order are those of the
    float64 distances (:func:`scalenc.math.neighbors.nearest` with ``refine``), ranked in X's
    precision (float32 data: twice the GEMM speed) and recomputed in float64 only where
    that ranking is in doubt (near-ties, distance ≈ 0); elsewhere the distances carry the
    ranking's rounding (about 1e-7 relative for float32 data). With ``exclude_self`` (X
    is S), row i never lists itself. Memory O(tile × |S|). X may be a device block (S is
    NumPy): the results are then arrays of X's device.
    """
    s = S.shape[0]
    k = min(k, s - 1 if exclude_self else s)
    exclude = np.arange(X.shape[0]) if exclude_self else None
    xp = namespace(X)
    X = as_block(xp, X)
    return nearest(X, S, k, exclude=exclude, dtype=ranking_dtype(xp, X.dtype), refine=True)


def heat_kernel_graph(S: np.ndarray, k: int, epsilon: float | None):
    """Symmetric k-NN graph of S with heat-kernel weights: (W as CSR s×s, ε).

    ``ε=None`` takes the mean squared distance of the directed k-NN pairs (so a typical
    edge weighs about exp(−1)); if that is 0 (all neighbours are duplicates) ε = 1.
    """
    s = S.shape[0]
    if s < 2:
        return sp.csr_matrix((s, s)), 1.0 if epsilon is None else float(epsilon)
    nbrs, d2 = knn_search(S, S, k, exclude_self=True)
    if epsilon is None:
        epsilon = float(d2.mean())
        if not epsilon > 0:
            epsilon = 1.0
    rows = np.repeat(np.arange(s), nbrs.shape[1])
    # weights of duplicates are exp(0) = 1; store 1 + w so zero-distance edges stay in the
    # sparse pattern during the symmetrisation, then subtract it again
    weights = 1.0 + np.exp(-d2.ravel() / epsilon)
    directed = sp.csr_matrix((weights, (rows, nbrs.ravel())), shape=(s, s))
    W = directed.maximum(directed.T).tocsr()
    W.data -= 1.0
    W.eliminate_zeros()
    return W, float(epsilon)


# --- the embedding dimension ----------------------------------------------------------------

#: k of the Levina–Bickel estimate behind ``n_components="auto"``.
INTRINSIC_NEIGHBORS = 5


def intrinsic_dimension(X: np.ndarray, k: int = INTRINSIC_NEIGHBORS) -> float:
    """Levina–Bickel maximum-likelihood estimate of the intrinsic dimension of the rows of X.

    With T_j(x) the distance from x to its j-th nearest other row, each row gives
    ``1/m̂(x) = (1/(k−1)) Σ_{j<k} log(T_k(x)/T_j(x))`` and the estimate is the inverse of
    their mean (MacKay & Ghahramani's average of the inverses, less biased than the mean
    of m̂(x)). Rows with a duplicate (T_1 = 0) are skipped. NaN when fewer than three
    distinct rows are left; inf when every row's k neighbours are equidistant.
    """
    X = np.asarray(X, dtype=np.float64)
    k = min(k, X.shape[0] - 1)
    if k < 2:
        return float("nan")
    _, d2 = knn_search(X, X, k, exclude_self=True)
    T = np.sqrt(d2[d2[:, 0] > 0])
    if T.shape[0] < 2:
        return float("nan")
    inverse = np.log(T[:, -1:] / T[:, :-1]).sum(axis=1) / (k - 1)
    mean = float(inverse.mean())
    return 1.0 / mean if mean > 0 else float("inf")


def auto_components(X: np.ndarray, codes: np.ndarray, n_classes: int) -> tuple[int, np.ndarray]:
    """``n_components="auto"``: m = max(L − 1, ⌈max_k d̂_k⌉ + 1) and the per-class d̂_k.

    L − 1 so that the L class centres can take general position (a linear head needs
    L − 1 directions to separate L classes); ⌈d̂⌉ + 1 because the paper chooses m one
    above the largest intrinsic dimension of the classes (Section V: 14 on satimage).
    d̂_k (:func:`intrinsic_dimension` of class k's subsample rows) is capped at p.
    The caller caps m at what the graph allows.
    """
    X = np.asarray(X)
    p = X.shape[1]
    dims = np.array([intrinsic_dimension(X[codes == c]) for c in range(n_classes)])
    known = dims[~np.isnan(dims)]
    largest = int(np.ceil(min(float(known.max()), p))) if known.size else 1
    return max(n_classes - 1, largest + 1, 1), dims


# --- the eigenproblem ---------------------------------------------------------------------


def ccdr_matrix(W: sp.spmatrix, codes: np.ndarray, n_classes: int, beta: float) -> sp.csr_matrix:
    """G = [[0, C], [Cᵀ, βW]] of size (L+s)×(L+s); class centres are nodes 0..L−1."""
    s = W.shape[0]
    codes = np.asarray(codes)
    labeled = np.flatnonzero(codes >= 0)
    C = sp.csr_matrix((np.ones(labeled.size), (codes[labeled], labeled)), shape=(n_classes, s))
    return sp.bmat([[sp.csr_matrix((n_classes, n_classes)), C], [C.T, beta * W]], format="csr")


# --- one subsample, solved ---------------------------------------------------------------


@dataclass(frozen=True)
class CCDRSolution:
    """CCDR solved on one subsample S, with what the Nyström extension needs.

    Attributes
    ----------
    indices : (s,) global row indices of S in the training data.
    X : (s, p) float64 rows of S.
    codes : (s,) class codes of S (−1 = unlabeled).
    centers : (L, m) class centres z_k (the first L rows of u_2 … u_{m+1}).
    embedding : (s, m) the subsample embedding y_j.
    eigenvalues : (m,) λ_2 … λ_{m+1}.
    epsilon : heat-kernel scale ε.
    beta, n_neighbors : β and k.
    W : (s, s) CSR heat-kernel graph (used when a row to embed equals a row of S).
    rotation : (m, m) orthogonal Procrustes rotation onto the reference subsample.
    """

    indices: np.ndarray
    X: np.ndarray
    codes: np.ndarray
    centers: np.ndarray
    embedding: np.ndarray
    eigenvalues: np.ndarray
    epsilon: float
    beta: float
    n_neighbors: int
    W: sp.csr_matrix
    rotation: np.ndarray
    info: dict

    def with_rotation(self, rotation: np.ndarray) -> CCDRSolution:
        return CCDRSolution(**{**self.__dict__, "rotation": rotation})

    @property
    def WY(self) -> np.ndarray:
        return self.W @ self.embedding

    @property
    def Wsum(self) -> np.ndarray:
        return np.asarray(self.W.sum(axis=1)).ravel()


def solve_ccdr(
    X: np.ndarray,
    codes: np.ndarray,
    indices: np.ndarray,
    n_classes: int,
    *,
    n_components: int | str,
    beta: float,
    n_neighbors: int,
    epsilon: float | None,
) -> CCDRSolution:
    """Build W and G on the subsample S and solve eq. (15) for the m-dim embedding.

    ``n_components="auto"`` takes m from :func:`auto_components`, capped at the non-trivial
    eigenvectors the graph has and stopped before an eigenvalue 1 (where eq. 20 divides by
    zero); ``info["intrinsic_dimension"]`` then holds the per-class estimates.
    """
    codes = np.asarray(codes)
    if not (codes >= 0).any():
        raise InputError(
            f"The subsample of {codes.size} rows has no labeled rows, so CCDR has no class "
            "to constrain the embedding. Label some rows (−1 marks unlabeled ones) or raise "
            "subsample_size."
        )
    present = np.bincount(codes[codes >= 0], minlength=n_classes)
    if (present == 0).any():
        raise InputError(
            f"Class code(s) {np.flatnonzero(present == 0).tolist()} have no row in the subsample "
            f"of {codes.size} rows; every class needs at least one labeled row in S. Raise "
            "subsample_size."
        )
    X = np.asarray(X, dtype=np.float64)
    W, eps = heat_kernel_graph(X, n_neighbors, epsilon)
    G = ccdr_matrix(W, codes, n_classes, beta)
    dims = None
    if n_components == "auto":
        n_components, dims = auto_components(X, codes, n_classes)
        connected = int(np.count_nonzero(np.asarray(G.sum(axis=1)).ravel() > 0))
        n_components = max(1, min(n_components, connected - 1))
    lam, U, info = graph_eigenvectors(G, n_components, n_classes)
    if dims is not None:
        info["intrinsic_dimension"] = dims
        at_one = np.flatnonzero(np.abs(1.0 - lam) < 1e-10)
        if at_one.size and at_one[0] > 0:
            n_components = int(at_one[0])
            lam, U = lam[:n_components], U[:, :n_components]
    if info["n_graph_components"] > 1:
        warnings.warn(
            f"The CCDR graph of the subsample has {info['n_graph_components']} connected "
            "components (classes or clusters with no k-NN edge between them). The first "
            f"{info['n_graph_components'] - 1} coordinates separate the components; raise "
            "n_neighbors or epsilon to connect them.",
            GraphWarning,
            stacklevel=3,
        )
    if info["n_isolated"]:
        warnings.warn(
            f"{info['n_isolated']} unlabeled subsample row(s) have no edge of non-zero weight "
            "(isolated points, heat-kernel weights underflow); they are embedded at 0. Raise "
            "epsilon to connect them.",
            GraphWarning,
            stacklevel=3,
        )
    if info["gap_tied"]:
        warnings.warn(
            f"λ_{n_components + 1} = λ_{n_components + 2}: the last embedding coordinate is one "
            "choice within a repeated eigenspace (the paper assumes λ_{m+1} < λ_{m+2}). "
            "Change n_components by one for a unique embedding.",
            GraphWarning,
            stacklevel=3,
        )
    if np.any(np.abs(1.0 - lam) < 1e-10):
        raise InputError(
            f"An eigenvalue λ = 1 is among the {n_components} smallest; the Nyström extension "
            "(eq. 20) divides by 1 − λ. Lower n_components."
        )
    L = n_classes
    return CCDRSolution(
        indices=np.asarray(indices, dtype=np.int64),
        X=X,
        codes=codes,
        centers=U[:L],
        embedding=U[L:],
        eigenvalues=lam,
        epsilon=eps,
        beta=float(beta),
        n_neighbors=int(n_neighbors),
        W=W,
        rotation=np.eye(n_components),
        info=info,
    )


# --- the Nyström extension (eq. 20) -------------------------------------------------------


def nystrom(sol: CCDRSolution, X: np.ndarray, codes: np.ndarray | None = None) -> np.ndarray:
    """f(x, c) of eq. (20) for the rows of X (b, p) → (b, m) float64, in ``sol``'s own frame.

    ``codes`` are class codes (−1: unknown label, the paper's c = 0); None means all
    unknown. The kernel sum runs over the k nearest rows of S. A row that equals a row
    x_j of S exactly is that point: its sum runs over j's row of W, so that
    ``f(x_j, c_j) = y_j`` (the consistency property after eq. 20).

    X may be a device block (``codes`` NumPy or of X's library): the result is then an
    array of X's device, and ``sol``'s small arrays go there.
    """
    nbrs, d2 = knn_search(X, sol.X, sol.n_neighbors)  # ranks in X's precision
    xp = namespace(X)
    X = as_block(xp, X)
    b = X.shape[0]
    m = sol.eigenvalues.size
    if codes is None:
        codes = xp.full(b, -1, dtype=xp.int64, device=device_of(X))
    else:
        codes = like(xp, codes, X, xp.int64)
    # exact copies of subsample rows (their float64 distance is 0; no float64 copy of X)
    same = xp.zeros(b, dtype=xp.bool, device=device_of(X))
    match = xp.zeros(b, dtype=xp.int64, device=device_of(X))
    norms = row_sq_norms(X, copy=False)
    near = d2 <= 1e-12 * (1.0 + norms)[:, None]
    S = like(xp, sol.X, X) if bool(xp.any(near)) else None
    for col in range(nbrs.shape[1]):
        cand = near[:, col] & ~same
        if bool(xp.any(cand)):
            at = nbrs[:, col][cand]
            hit = xp.zeros_like(same)
            hit[cand] = xp.all(X[cand] == xp.take(S, at, axis=0), axis=1)
            same = same | hit
            match = xp.where(hit, nbrs[:, col], match)
    Y = like(xp, sol.embedding, X)
    # kernel sums: Σ_j K(x, x_j) y_j and Σ_j K(x, x_j); for c = 0 a common factor
    # exp(−d²_min/ε) cancels in the ratio, which keeps far rows from underflowing to 0/0
    labeled = codes >= 0
    shift = xp.where(labeled, 0.0, d2[:, 0])
    K = xp.exp(-(d2 - shift[:, None]) / sol.epsilon)
    ksum = xp.sum(K, axis=1)
    ky = _weighted_rows(K, nbrs, Y)
    if bool(xp.any(same)):
        Wsum, WY = like(xp, sol.Wsum, X), like(xp, sol.WY, X)
        ksum[same] = xp.take(Wsum, match[same])
        ky[same] = xp.take(WY, match[same], axis=0)
    # in place: b×m arrays made fresh here were a tenth of a block's time on a Dask
    # worker at p = 32 (page faults: see benchmarks/worker_faults.py)
    num = ky
    num *= sol.beta
    den = ksum
    den *= sol.beta
    num[labeled] += xp.take(like(xp, sol.centers, X), codes[labeled], axis=0)
    den[labeled] += 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        num /= den[:, None]
    num[den == 0] = 0.0  # isolated subsample rows (no edge of non-zero weight)
    if m:
        num /= like(xp, 1.0 - sol.eigenvalues, X)[None, :]
    return num


def _weighted_rows(weights: np.ndarray, rows: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Σ_j weights[i, j] · Y[rows[i, j]] for each i: one sparse (b × s) product with Y.

    A CSR matrix of k entries per row and scipy's sparse-dense product: 3–4× faster than
    gathering the (b, k, m) array ``Y[rows]`` and contracting it, and without it. A
    missing neighbour (row −1, weight 0) adds nothing. On a device (no sparse product in
    the array API), one gather of Y's rows per neighbour, summed in the same order.
    """
    xp = namespace(weights)
    b, k = rows.shape
    index = xp.where(rows >= 0, rows, 0)
    if xp is not np:
        out = xp.zeros((b, Y.shape[1]), dtype=xp.float64, device=device_of(weights))
        for j in range(k):
            out += weights[:, j : j + 1] * xp.take(Y, index[:, j], axis=0)
        return out
    W = sp.csr_matrix(
        (weights.ravel(), index.ravel(), np.arange(0, b * k + 1, k)), shape=(b, Y.shape[0])
    )
    return np.asarray(W @ Y)


def nystrom_ensemble(solutions, X: np.ndarray, codes: np.ndarray | None = None) -> np.ndarray:
    """Average over subsamples of f_b(x, c) R_b (each aligned to the reference frame)."""
    if len(solutions) == 1:  # the reference frame: its rotation is the identity
        return nystrom(solutions[0], X, codes)
    xp = namespace(X)
    total = None
    for sol in solutions:
        F = nystrom(sol, X, codes) @ like(xp, sol.rotation, X)
        total = F if total is None else total + F
    return total / len(solutions)


def align(solutions: list[CCDRSolution]) -> list[CCDRSolution]:
    """Rotate each subsample's frame onto the first by orthogonal Procrustes.

    Landmarks: the class centres z_k and the reference subsample's rows (each embedded by
    the subsample's own Nyström map with its label), which pin every direction also when
    L ≤ m.
    """
    if len(solutions) == 1:
        return solutions
    ref = solutions[0]
    target = np.vstack([ref.centers, ref.embedding])
    out = [ref]
    for sol in solutions[1:]:
        source = np.vstack([sol.centers, nystrom(sol, ref.X, ref.codes)])
        out.append(sol.with_rotation(procrustes(source, target)))
    return out


# --- block functions of the estimators' maps and passes, and the classifier heads --------


# Each takes a NumPy block or a device block (CuPy's: :mod:`scalenc.math.xp`), whose
# embedding and outputs stay on its device; labels and class codes arrive as NumPy.


def split_codes(X, with_codes):
    if not with_codes:
        return X, None
    xp = namespace(X)
    return X[:, :-1], xp.astype(X[:, -1], xp.int64)


def embed(X, codes, solutions):
    check_finite(X, magnitude=False)  # a float64 extension, as the fit's subsample
    return nystrom_ensemble(solutions, X, codes)


def transform_block(X, *, solutions, with_codes, out_dtype):
    X, codes = split_codes(X, with_codes)
    xp = namespace(X)
    return xp.astype(embed(X, codes, solutions), dtype_in(xp, out_dtype), copy=False)


def scores_block(X, *, solutions, head, binary):
    scores = head.scores(embed(X, None, solutions))
    return scores[:, 1] - scores[:, 0] if binary else scores


def proba_block(X, *, solutions, head):
    return head.proba(embed(X, None, solutions))


def predict_block(X, *, solutions, head, classes):
    xp = namespace(X)
    return take_classes(xp, classes, xp.argmax(head.proba(embed(X, None, solutions)), axis=1))


def _labeled(X, codes, solutions):
    """The embedding f(x, c) of the labeled rows of a block, and their codes (NumPy codes
    of a device block go to its device)."""
    xp = namespace(X)
    codes = like(xp, to_host(codes), X)
    keep = codes >= 0
    return embed(X[keep], codes[keep], solutions), codes[keep]


def linear_stats_block(X, codes, *, row_start, solutions, n_classes):
    """Σ [y 1]ᵀ[y 1] and Σ [y 1]ᵀ onehot over the labeled rows, y = f(x, c)."""
    F, codes = _labeled(X, codes, solutions)
    xp = namespace(F)
    device = device_of(F)
    A = xp.concat([F, xp.ones((F.shape[0], 1), dtype=F.dtype, device=device)], axis=1)
    classes = xp.arange(n_classes, dtype=codes.dtype, device=device)
    onehot = xp.astype(codes[:, None] == classes[None, :], F.dtype)
    return {"gram": A.T @ A, "cross": A.T @ onehot}


def lda_stats_block(X, codes, *, row_start, solutions, n_classes):
    F, codes = _labeled(X, codes, solutions)
    return class_moments(F, codes, n_classes, scatter=True)


# --- classifiers on the m-dim embedding ---------------------------------------------------


class LinearHead:
    """The paper's linear classifier (Section V-A): least squares of the class indicators on
    [y, 1]; ``proba`` is the softmax of the scores (same argmax)."""

    def __init__(self, gram, cross):
        self.coef, *_ = np.linalg.lstsq(gram, cross, rcond=None)  # (m+1, L)

    def scores(self, F):
        coef = like(namespace(F), self.coef, F)
        return F @ coef[:-1, :] + coef[-1, :]

    def proba(self, F):
        return namespace(F).exp(log_softmax(self.scores(F)))


class LDAHead:
    def __init__(self, moments):
        self.model = lda_from_moments(moments["n"], moments["mean"], moments["scatter"])

    def scores(self, F):
        return lda_log_proba(self.model, F)

    def proba(self, F):
        return namespace(F).exp(self.scores(F))


class KNNHead:
    """k-NN vote in the embedding among the labeled subsample rows (bounded memory)."""

    def __init__(self, F, codes, n_classes, k):
        keep = codes >= 0
        self.F, self.codes, self.n_classes = F[keep], codes[keep], n_classes
        self.k = min(k, self.F.shape[0])

    def proba(self, F):
        nbrs, _ = knn_search(F, self.F, self.k)
        xp = namespace(F)
        device = device_of(F)
        voted = xp.take(like(xp, self.codes, F), xp.reshape(nbrs, (-1,)))
        classes = xp.arange(self.n_classes, dtype=voted.dtype, device=device)
        votes = xp.zeros((F.shape[0], self.n_classes), dtype=xp.float64, device=device)
        for j in range(self.k):  # each neighbour's one vote
            votes += xp.astype(voted[j :: self.k][:, None] == classes[None, :], xp.float64)
        return votes / self.k

    def scores(self, F):
        return self.proba(F)
