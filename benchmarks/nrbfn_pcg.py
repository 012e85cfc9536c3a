"""nRBFN's ridge system by preconditioned conjugate gradients beside the normal equations.

Issue 26: does an iterative solver (Falkon-style PCG, passes of n·r·p instead of one
n·r² Gram) beat the normal equations at the default λ on some shapes? For each dataset,
``NRBFNClassifier()`` is fitted once with its defaults; its basis, σ and λ (``alpha_``)
define the system the library solves,

    (W̃ᵀW̃ + λ'I) w = W̃ᵀY,    λ' = λ tr(W̃ᵀW̃)    (``ridge_solve``: X* = B (M + λ'I)⁻¹),

with W̃ the n×r normalised kernel of the training rows (``normalized_kernel``) and Y their
one-hot labels. The normal equations are timed as the library runs them: ``gram_block``
over one row block per core on a thread each (BLAS on one thread per thread), the
partials summed, then ``ridge_solve``.

PCG solves the K right-hand sides as K independent CGs on the stacked matrix. Every
iteration is one pass over the training rows: per row tile, W̃ of the tile is formed again
(n·r·p products + n·r exponentials) and W̃ᵀ(W̃ V) applied, the tiles split over one
thread per core. One more pass gives the right-hand side W̃ᵀY and diag(W̃ᵀW̃) (hence
tr and λ'). Preconditioners:

* ``none`` and ``jacobi`` (diag(W̃ᵀW̃) + λ', free after the first pass);
* ``nys-m`` for m = r and 2r (Falkon's idea): (n/m) W̃_mᵀW̃_m + λ'I of m training rows
  drawn uniformly (seed 0), Cholesky-factored once (m·r² + r³/3);
* ``basis``: the same from the basis rows themselves (m = r, rows already chosen).

All solves (every λ × preconditioner) advance together, their directions stacked in one
pass, so the iteration counts cost one run; the seconds per iteration are timed apart, for
one solve's K columns, and PCG's total is setup + (iterations + 1) × that. A solve stops at
``--max-iter``, at four times the iterations at which PCG would tie with the normal
equations (at least 30), or when it has reached both targets. The targets: the test
error within 0.1 point of the normal equations' at the same λ (reached at the first
iterate whose error is at most the reference + 0.1), and the relative residual
‖B − (M + λ'I)X‖_F / ‖B‖_F (CG's recursive residual) below 1e-3 and 1e-6.

Datasets: PMLB tables from ``--pmlb-dir`` (Connect-4 raw as ``nrbfn_scale.py``, the others
standardised, a stratified 2/3 split, seed 0: ``nrbfn_basis_curves.load``), and ``sim32``,
``sim256``: the ``uniform_noise`` simulation (K = 5) of ``roofline.py`` with
``--sim-rows`` training rows and ``--test-rows`` test rows.

    python benchmarks/nrbfn_pcg.py --datasets connect_4 adult --pmlb-dir DIR
    python benchmarks/nrbfn_pcg.py --datasets sim32 sim256 --json pcg.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))

from nrbfn_basis_curves import load as load_table  # noqa: E402

from scalenc import NRBFNClassifier  # noqa: E402
from scalenc.math.linalg import ridge_solve  # noqa: E402
from scalenc.nrbfn import blocks as nb  # noqa: E402

ALPHAS = [1e-10, 1e-8, 1e-6]  # besides the fitted model's alpha_ (the default 1e-13)
TARGETS = (1e-3, 1e-6)
CORES = os.cpu_count() or 1


def load(name, pmlb_dir, sim_rows, test_rows):
    if name in ("sim32", "sim256"):
        from scalenc.simulate import simulate

        p = int(name[3:])
        X, y = simulate("uniform_noise", sim_rows + test_rows, p, 5, random_state=0)
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
        return X[:sim_rows], y[:sim_rows], X[sim_rows:], y[sim_rows:]
    return load_table(name, pmlb_dir, sim_rows)


def row_blocks(n: int, n_blocks: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, n_blocks + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def normal_equations(pool, X, codes, blocks, basis, sigma, K, lam):
    """(M, B, weights, Gram s, solve s): ``gram_block`` per block on the pool, summed, then
    ``ridge_solve`` as ``fit`` runs them."""
    t0 = time.perf_counter()
    with threadpool_limits(1):
        parts = list(
            pool.map(
                lambda blk: nb.gram_block(
                    X[blk[0] : blk[1]],
                    codes[blk[0] : blk[1]],
                    row_start=blk[0],
                    basis=basis,
                    kernels=((sigma, True),),
                    n_classes=K,
                    n_folds=1,
                    seed=0,
                ),  # fmt: skip
                blocks,
            )
        )
    total = nb.sum_gram_partials(*parts)
    gram_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    weights, problem = ridge_solve(total["M"][0, 0], total["B"][0, 0], lam)
    solve_s = time.perf_counter() - t0
    M = total["M"][0, 0]
    return np.tril(M) + np.tril(M, -1).T, total["B"][0, 0], weights, gram_s, solve_s, problem


class KernelPasses:
    """Passes over the training rows that form W̃ tile by tile and apply it."""

    def __init__(self, pool, X, codes, blocks, basis, sigma, K, tile_rows):
        self.pool, self.X, self.codes, self.blocks = pool, X, codes, blocks
        self.basis, self.sigma, self.K = basis, sigma, K
        self.r = basis.shape[0]
        self.prepared = nb.prepare_basis(basis, sigma, np.result_type(X.dtype, np.float32))
        self.tile = tile_rows or nb._basis_tiles(X.shape[0], self.r)

    def _tiles(self, blk):
        buf = np.empty((self.tile, self.r))
        for start in range(blk[0], blk[1], self.tile):
            stop = min(blk[1], start + self.tile)
            W = nb.normalized_kernel(
                self.X[start:stop], self.basis, self.sigma,
                out=buf[: stop - start], prepared=self.prepared,
            )  # fmt: skip
            yield start, stop, W

    def _map(self, fn):
        with threadpool_limits(1):
            return list(self.pool.map(fn, self.blocks))

    def rhs(self):
        """W̃ᵀY (r×K) and diag(W̃ᵀW̃): the first pass of PCG."""

        def block(blk):
            B, diag = np.zeros((self.r, self.K)), np.zeros(self.r)
            eye = np.eye(self.K)
            for start, stop, W in self._tiles(blk):
                B += W.T @ eye[self.codes[start:stop]]
                diag += np.einsum("ij,ij->j", W, W)
            return B, diag

        parts = self._map(block)
        return sum(p[0] for p in parts), sum(p[1] for p in parts)

    def apply(self, V):
        """W̃ᵀ(W̃ V) for V of shape (r, c): one pass."""

        def block(blk):
            out = np.zeros_like(V)
            for _, _, W in self._tiles(blk):
                out += W.T @ (W @ V)
            return out

        return sum(self._map(block))


def preconditioners(X, basis, sigma, n, r, diag, lam_primes, seed=0):
    """{name: (setup s, {λ: function R → P⁻¹R})} for every preconditioner and λ'."""
    rng = np.random.default_rng(seed)
    out = {
        "none": (0.0, {lp: (lambda R: R) for lp in lam_primes}),
        "jacobi": (0.0, {lp: (lambda R, d=diag + lp: R / d[:, None]) for lp in lam_primes}),
    }
    samples = {f"nys-{f}r": rng.choice(n, size=min(n, f * r), replace=False) for f in (1, 2)}
    samples["basis"] = None
    for name, rows in samples.items():
        setup = {}
        t0 = time.perf_counter()
        Wm = nb.normalized_kernel(basis if rows is None else X[np.sort(rows)], basis, sigma)
        G = Wm.T @ Wm
        G *= n / Wm.shape[0]
        form_s = time.perf_counter() - t0
        facs, chol_s = {}, []
        for lp in lam_primes:
            t0 = time.perf_counter()
            Gl = G.copy()
            Gl[np.diag_indices(r)] += lp
            try:
                cf = scipy.linalg.cho_factor(Gl, lower=True, overwrite_a=True, check_finite=False)
                facs[lp] = lambda R, cf=cf: scipy.linalg.cho_solve(cf, R, check_finite=False)
            except np.linalg.LinAlgError:
                facs[lp] = None
            chol_s.append(time.perf_counter() - t0)
        setup = form_s + float(np.median(chol_s))
        out[name] = (setup, facs)
    return out


def run_pcg(passes, B, solves, Wtest, test_codes, ref_errors, max_iters, time_limit):
    """Advance every solve together (their directions stacked in one pass per iteration).

    ``solves``: list of dicts with keys lam, lp (λ'), precond (R → P⁻¹R or None). Returns,
    per solve, the test error and residual of every iterate.
    """
    K = B.shape[1]
    bnorm = np.linalg.norm(B)
    state = []
    for s in solves:
        if s["precond"] is None:
            state.append(None)
            continue
        Z = s["precond"](B)
        state.append({"X": np.zeros_like(B), "R": B.copy(), "Z": Z, "P": Z.copy(),
                      "rz": np.sum(B * Z, axis=0), "res": [1.0], "err": [None], "done": False})  # fmt: skip
    t_start = time.perf_counter()
    it = 0
    while True:
        active = [i for i, st in enumerate(state) if st is not None and not st["done"]]
        if not active or time.perf_counter() - t_start > time_limit:
            break
        it += 1
        AP = passes.apply(np.hstack([state[i]["P"] for i in active]))
        for j, i in enumerate(active):
            st, s = state[i], solves[i]
            Q = AP[:, j * K : (j + 1) * K] + s["lp"] * st["P"]
            alpha = st["rz"] / np.sum(st["P"] * Q, axis=0)
            st["X"] += alpha * st["P"]
            st["R"] -= alpha * Q
            st["res"].append(float(np.linalg.norm(st["R"]) / bnorm))
            st["Z"] = s["precond"](st["R"])
            rz = np.sum(st["R"] * st["Z"], axis=0)
            st["P"] = st["Z"] + (rz / st["rz"]) * st["P"]
            st["rz"] = rz
        errs = np.argmax(
            (Wtest @ np.hstack([state[i]["X"] for i in active])).reshape(-1, len(active), K),
            axis=2,
        )
        for j, i in enumerate(active):
            st = state[i]
            st["err"].append(100.0 * float(np.mean(errs[:, j] != test_codes)))
            reached = min(st["err"][1:]) <= ref_errors[solves[i]["lam"]] + 0.1
            if (reached and st["res"][-1] < TARGETS[-1]) or it >= max_iters[i]:
                st["done"] = True
            if not np.isfinite(st["res"][-1]):
                st["done"] = True
    return state


def first_below(values, bound):
    for k, v in enumerate(values):
        if v is not None and v <= bound:
            return k
    return None


def dataset(name, args, pool) -> dict:
    Xtr, ytr, Xte, yte = load(name, args.pmlb_dir, args.sim_rows, args.test_rows)
    (n, p) = Xtr.shape
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = NRBFNClassifier(random_state=0).fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    classes = model.classes_
    codes, test_codes = np.searchsorted(classes, ytr), np.searchsorted(classes, yte)
    K, basis, sigma, r = classes.size, model.basis_, float(model.sigma_), model.basis_.shape[0]
    lams = [float(model.alpha_), *[a for a in args.alphas if a != model.alpha_]]
    blocks = row_blocks(n, args.blocks or CORES)
    print(
        f"\n{name}: {n} × {p}, K = {K}, test {yte.size}; NRBFNClassifier() fit {fit_s:.1f} s "
        f"(r = {r}, σ = {sigma:.4g}, λ = {model.alpha_:g}, test error "
        f"{100 * (1 - model.score(Xte, yte)):.2f} %); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    # the normal equations, as fit runs them (timed), and their solutions at the other λ
    M, Bne, W0, gram_s, solve_s, problem = normal_equations(
        pool, Xtr, codes, blocks, basis, sigma, K, lams[0]
    )
    trace = float(np.trace(M))
    with threadpool_limits(CORES):
        Wtest = np.vstack([nb.normalized_kernel(Xte[i : i + 5000], basis, sigma)
                           for i in range(0, Xte.shape[0], 5000)])  # fmt: skip
    ref = {}
    for lam in lams:
        W = W0 if lam == lams[0] else ridge_solve(M, Bne, lam)[0]
        ref[lam] = 100.0 * float(np.mean(np.argmax(Wtest @ W.T, axis=1) != test_codes))
    ne_s = gram_s + solve_s
    print(f"normal equations: Gram {gram_s:.2f} s + solve {solve_s:.2f} s = {ne_s:.2f} s"
          f"{'; ' + problem if problem else ''}; test error % by λ: "
          + ", ".join(f"{lam:g}: {e:.2f}" for lam, e in ref.items()), flush=True)  # fmt: skip
    del W0

    passes = KernelPasses(pool, Xtr, codes, blocks, basis, sigma, K, args.tile_rows)
    t0 = time.perf_counter()
    B, diag = passes.rhs()
    rhs_s = time.perf_counter() - t0
    V = np.random.default_rng(1).standard_normal((r, K))
    times = []
    for _ in range(args.timing_passes):
        t0 = time.perf_counter()
        passes.apply(V)
        times.append(time.perf_counter() - t0)
    iter_s = float(np.median(times))
    lam_primes = {lam: lam * float(diag.sum()) for lam in lams}
    with threadpool_limits(CORES):
        pre = preconditioners(Xtr, basis, sigma, n, r, diag, list(lam_primes.values()))
    print(
        f"PCG: first pass (W̃ᵀY, diag) {rhs_s:.2f} s, one iteration {iter_s:.2f} s "
        f"(median of {len(times)}), tr from the pass / the Gram's "
        f"{diag.sum() / trace:.12f}; setup s: "
        + ", ".join(f"{k} {v[0]:.2f}" for k, v in pre.items()),
        flush=True,
    )
    solves, max_iters = [], []
    for lam in lams:
        for pname, (setup, facs) in pre.items():
            solves.append({"lam": lam, "lp": lam_primes[lam], "name": pname, "setup": setup,
                           "precond": facs[lam_primes[lam]]})  # fmt: skip
            tie = (ne_s - setup) / iter_s - 1.0
            max_iters.append(int(min(args.max_iter, max(30, 4 * tie))))
    t0 = time.perf_counter()
    state = run_pcg(passes, B, solves, Wtest, test_codes, ref, max_iters, args.time_limit)
    run_s = time.perf_counter() - t0
    out = {
        "dataset": name, "n": n, "p": p, "K": K, "r": r, "test_rows": int(yte.size),
        "fit_s": fit_s, "gram_s": gram_s, "solve_s": solve_s, "normal_s": ne_s,
        "rhs_pass_s": rhs_s, "iter_s": iter_s, "iter_times": times, "pcg_run_s": run_s,
        "reference_error": ref, "tile_rows": passes.tile, "blocks": len(blocks),
        "load_average": os.getloadavg(), "solves": [],
    }  # fmt: skip
    print(
        "| λ | preconditioner | setup s | iterations to the NE error (+0.1) / residual 1e-3 /"
        " 1e-6 | PCG s to the NE error | PCG s to 1e-6 | normal eq. s | NE error % |"
        " PCG error % there (at the last iterate) | ties at iteration | last residual (true) |"
    )
    print("|---:|---|---:|---|---:|---:|---:|---:|---|---:|---|")
    for s, st in zip(solves, state):
        row = {"alpha": s["lam"], "preconditioner": s["name"], "setup_s": s["setup"]}
        if st is None:
            row["failed"] = "Cholesky failed"
            out["solves"].append(row)
            print(f"| {s['lam']:g} | {s['name']} | Cholesky failed |")
            continue
        k_err = first_below(st["err"], ref[s["lam"]] + 0.1)
        k_res = [first_below(st["res"], t) for t in TARGETS]
        iters = len(st["res"]) - 1
        true_res = float(np.linalg.norm(B - (M @ st["X"] + s["lp"] * st["X"])) / np.linalg.norm(B))

        def total(k, setup=s["setup"]):
            return None if k is None else setup + (k + 1) * iter_s

        tie = (ne_s - s["setup"]) / iter_s - 1.0
        row.update(
            iterations=iters, to_error=k_err, to_residual=dict(zip(map(str, TARGETS), k_res)),
            total_to_error_s=total(k_err), total_to_1e6_s=total(k_res[-1]), tie_iteration=tie,
            errors=st["err"][1:], residuals=st["res"], true_residual=true_res,
        )  # fmt: skip
        out["solves"].append(row)

        def fmt(k, iters=iters):
            return f">{iters}" if k is None else str(k)

        last_s = total(iters)

        def fmt_s(t, last_s=last_s):
            return f">{last_s:.1f}" if t is None else f"{t:.1f}"

        err_there = st["err"][k_err] if k_err is not None else None
        print(
            f"| {s['lam']:g} | {s['name']} | {s['setup']:.2f} | {fmt(k_err)} / "
            f"{fmt(k_res[0])} / {fmt(k_res[1])} | {fmt_s(total(k_err))} | "
            f"{fmt_s(total(k_res[1]))} | {ne_s:.1f} | {ref[s['lam']]:.2f} | "
            f"{'' if err_there is None else f'{err_there:.2f} '}({st['err'][-1]:.2f}) | "
            f"{tie:.0f} | {st['res'][-1]:.1e} ({true_res:.1e}) |",
            flush=True,
        )
    print(f"(the PCG run of all solves together took {run_s:.0f} s; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())})", flush=True)  # fmt: skip
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["connect_4", "adult", "sim32", "sim256"])
    parser.add_argument("--pmlb-dir", type=Path, default=None)
    parser.add_argument("--sim-rows", type=int, default=200_000)
    parser.add_argument("--test-rows", type=int, default=50_000, help="of the simulations")
    parser.add_argument("--alphas", nargs="+", type=float, default=ALPHAS)
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--time-limit", type=float, default=240.0, help="s of PCG per dataset")
    parser.add_argument("--timing-passes", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=None, help="row blocks (default: cores)")
    parser.add_argument("--tile-rows", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    results = []
    with ThreadPoolExecutor(CORES) as pool:
        for name in args.datasets:
            results.append(dataset(name, args, pool))
            if args.json:
                args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
