"""The markdown page of ``defaults.py``'s results: current figures only.

``report(results, ...)`` reads the JSON that ``defaults.py --out`` writes and prints, per
half (``tune``, ``report``, ``shaped``): each scalenc estimator's wins, ties and losses
against each peer (a tie: within ``TIE`` = 0.5 point of test error), issue 36's criteria,
the test error of every method on every dataset, what the defaults chose, and the datasets
where a scalenc estimator is more than ``TIE`` behind the better of SVC and 5-NN, with the
facts its cells hold. Nothing here runs a fit.
"""

from __future__ import annotations

TIE = 0.5  # points of test error %
HALVES = ("tune", "report", "shaped")


def error(cell: dict | None) -> float | None:
    return None if cell is None else cell.get("error_pct")


def short(cell: dict | None) -> str:
    """A cell without an error: why."""
    if cell is None:
        return "—"
    if cell.get("timed_out"):
        return "t/o"
    return "failed" if "failed" in cell else "—"


def rows_of(results: dict, half_of: dict, half: str) -> list[tuple[str, dict]]:
    """The datasets of ``half`` in the results, by rows."""
    sets = [(n, d) for n, d in results["datasets"].items() if half_of.get(n, "other") == half]
    return sorted(sets, key=lambda item: (item[1]["info"]["rows"], item[0]))


def present(sets: list[tuple[str, dict]], methods) -> list[str]:
    return [m for m in methods if any(m in d["cells"] for _, d in sets)]


def reference(cells: dict) -> tuple[float | None, str]:
    """The better of SVC's and 5-NN's errors, and which."""
    options = [(error(cells.get(m)), m) for m in ("svc", "knn5")]
    options = [(e, m) for e, m in options if e is not None]
    return min(options) if options else (None, "")


def win_tie_loss(sets, labels, scalenc, peers) -> list[str]:
    mine, theirs = present(sets, scalenc), present(sets, peers)
    lines = [
        "| estimator | " + " | ".join(f"vs {p}" for p in theirs) + " |",
        "| --- |" + " --- |" * len(theirs),
    ]
    for m in mine:
        row = []
        for p in theirs:
            w = t = loss = peer_out = own_out = 0
            for _, d in sets:
                a, b = d["cells"].get(m), d["cells"].get(p)
                if a is None or b is None:
                    continue
                ea, eb = error(a), error(b)
                if ea is None and eb is None:
                    continue
                if eb is None:
                    peer_out += 1
                elif ea is None:
                    own_out += 1
                elif ea < eb - TIE:
                    w += 1
                elif ea > eb + TIE:
                    loss += 1
                else:
                    t += 1
            text = f"{w} / {t} / {loss}"
            text += f" (+{peer_out} peer t/o or failed)" if peer_out else ""
            text += f" (+{own_out} own t/o or failed)" if own_out else ""
            row.append(text)
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return lines


def criteria(sets, labels, scalenc) -> list[str]:
    """Issue 36's done-when criteria, on the cells of ``sets`` (nRBFN's for each of its
    variants)."""
    lines = []
    for m in [m for m in scalenc if m.startswith("nrbfn")]:
        pairs = [(n, d["cells"]) for n, d in sets if error(d["cells"].get(m)) is not None]
        if not pairs:
            continue
        with_svc = [(n, c) for n, c in pairs if error(c.get("svc")) is not None]
        close = [n for n, c in with_svc if error(c[m]) <= error(c["svc"]) + TIE]
        gaps = [(error(c[m]) - reference(c)[0], n) for n, c in pairs if reference(c)[0] is not None]
        share = f"{100 * len(close) / len(with_svc):.0f} %" if with_svc else "—"
        worst = max(gaps) if gaps else None
        lines.append(
            f"* {labels[m]}: within {TIE} point of SVC() or better on {len(close)} of "
            f"{len(with_svc)} datasets where SVC ran ({share}; target ≥ 90 %); worst gap to "
            f"the better of SVC and 5-NN "
            + (f"{worst[0]:+.2f} points ({worst[1]}; target ≤ +2)" if worst else "—")
        )
    if any("encoder" in d["cells"] for _, d in sets):
        gaps = []
        for n, d in sets:
            c = d["cells"]
            best = [error(c.get(v)) for v in ("encoder-linear", "encoder-3k")]
            best = [e for e in best if e is not None]
            if error(c.get("encoder")) is not None and best:
                gaps.append((error(c["encoder"]) - min(best), n))
        if gaps:
            worst = max(gaps)
            lines.append(
                f"* {labels['encoder']}: worst gap to the better of its linear and three-kernel "
                f"fits {worst[0]:+.2f} points ({worst[1]}; target ≤ +0.3), over {len(gaps)} "
                "datasets"
            )
    return lines


def error_table(sets, labels, methods) -> list[str]:
    cols = present(sets, methods)
    lines = [
        "| dataset | rows × p, K | " + " | ".join(cols) + " |",
        "| --- | --- |" + " ---: |" * len(cols),
    ]
    for name, d in sets:
        info, cells = d["info"], d["cells"]
        errs = [error(cells.get(m)) for m in cols]
        best = min((e for e in errs if e is not None), default=None)
        row = []
        for m, e in zip(cols, errs):
            if e is None:
                row.append(short(cells.get(m)))
            else:
                row.append(f"**{e:.2f}**" if abs(e - best) < 1e-9 else f"{e:.2f}")
        lines.append(
            f"| {name} | {info['train_rows'] + info['test_rows']:,} × {info['features']}, "
            f"{info['classes']} | " + " | ".join(row) + " |"
        )
    return lines


def ratio_to_svc(cells: dict, m: str) -> str:
    a, s = cells.get(m, {}).get("fit_s"), cells.get("svc", {}).get("fit_s")
    return f"{a / s:.2g}×" if a is not None and s else "—"


def choices_table(sets, labels) -> list[str]:
    lines = [
        "| dataset | nRBFN r (rule asked) | α | mode, soft-KNN | nRBFN fit s (÷ SVC) | "
        "SVC fit s, SVs | encoder kernel_ | 3-kernel kernel_ | CCDR m |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- | --- | ---: |",
    ]
    for name, d in sets:
        c = d["cells"]
        nr = c.get("nrbfn", {}).get("notes", {})
        fit = c.get("nrbfn", {}).get("fit_s")
        svc = c.get("svc", {})
        sv = svc.get("notes", {}).get("support_vectors")
        lines.append(
            f"| {name} | {nr.get('basis_r', '—')} ({nr.get('basis_wanted', '—')}) | "
            + (f"{nr['alpha_']:.0e}" if nr.get("alpha_") is not None else "—")
            + f" | {nr.get('fit_mode_', '—')}, {nr.get('soft_knn', '—')} | "
            + (f"{fit:.1f} ({ratio_to_svc(c, 'nrbfn')})" if fit is not None else "—")
            + " | "
            + (f"{svc['fit_s']:.1f}, {sv}" if "fit_s" in svc else short(c.get("svc")))
            + f" | {c.get('encoder', {}).get('notes', {}).get('kernel_', '—')} | "
            f"{c.get('encoder-3k', {}).get('notes', {}).get('kernel_', '—')} | "
            f"{c.get('ccdr', {}).get('notes', {}).get('n_components_', '—')} |"
        )
    return lines


def facts(cells: dict, m: str) -> str:
    """What the cells hold that may say why ``m`` lost."""
    cell, notes = cells[m], cells[m].get("notes", {})
    parts = []
    if "basis_r" in notes:
        wanted = notes.get("basis_wanted")
        capped = wanted not in (None, "grown", notes["basis_r"])
        parts.append(
            (
                f"basis {notes['basis_r']} (grown by held-out error)"
                if wanted == "grown"
                else f"basis {notes['basis_r']} of {wanted} asked"
            )
            + (f" (capped by {notes.get('max_basis_source')})" if capped else "")
            + f", α = {notes.get('alpha_'):.0e}, "
            f"{notes.get('fit_mode_')}, soft-KNN {notes.get('soft_knn')}, "
            f"σ = {notes.get('sigma_', float('nan')):.3g}, rank {notes.get('rank_')}"
        )
    if "kernel_" in notes:
        parts.append(f"kernel_ {notes['kernel_']}")
    if "n_components_" in notes:
        parts.append(f"m = {notes['n_components_']}")
    parts.append(f"fit {cell['fit_s']:.1f} s ({ratio_to_svc(cells, m)} SVC's)")
    if cells.get("svc", {}).get("notes", {}).get("support_vectors"):
        parts.append(f"SVC {cells['svc']['notes']['support_vectors']} support vectors")
    for w in cell.get("warnings", []):
        parts.append("warned " + w.split(":")[0])
    return "; ".join(parts)


def losses(sets, labels, scalenc) -> list[str]:
    lines = []
    for m in present(sets, scalenc):
        lost = []
        for name, d in sets:
            c = d["cells"]
            ref, which = reference(c)
            mine = error(c.get(m))
            if m in c and "same_as" in c[m]:
                continue
            if mine is None and m in c and ref is not None:
                lost.append(f"  * {name}: {c[m]['failed'].splitlines()[0][:160]}")
            elif mine is not None and ref is not None and mine > ref + TIE:
                others = ", ".join(
                    f"{p} {error(c[p]):.2f}" for p in ("svc", "knn5")
                    if error(c.get(p)) is not None
                )  # fmt: skip
                lost.append(f"  * {name}: {mine:.2f} % against {others} "
                            f"({mine - ref:+.2f}): {facts(c, m)}")  # fmt: skip
        same = {d["cells"][m].get("same_as") for _, d in sets if m in d["cells"]} - {None}
        head = f"* **{m}** ({labels[m]})"
        if same:
            lines.append(head + f": the same estimator as {', '.join(sorted(same))}")
            continue
        lines.append(head + (f": {len(lost)} dataset(s)" if lost else ": none"))
        lines += lost
    return lines


def failures(sets, labels) -> list[str]:
    out = []
    for name, d in sets:
        for m, cell in d["cells"].items():
            if "failed" in cell and "same_as" not in cell:
                out.append(f"* {name} · {labels.get(m, m)}: {cell['failed'].splitlines()[0][:200]}")
    return out


def report(results: dict, half_of: dict, labels: dict, scalenc, peers) -> str:
    """The markdown page of ``results`` (see the module's docstring)."""
    methods = [m for m in labels if m in scalenc or m in peers]
    proto = results["protocol"]
    runs = results.get("runs", [])
    codes = sorted({c.get("code") for d in results["datasets"].values()
                    for c in d["cells"].values()} - {None})  # fmt: skip
    loads = [c.get("load_average") for d in results["datasets"].values()
             for c in d["cells"].values() if c.get("load_average") is not None]  # fmt: skip
    out = [
        "# scalenc's defaults beside scikit-learn's (benchmarks/defaults.py)",
        "",
        f"PMLB at {proto['pmlb_commit'][:10]}; split: {proto['split']}; scaling: "
        f"{proto['scaling']}; budget {proto['time_budget_s']:g} s per fit process"
        + (f"; **quick**: {proto['quick_rows']} rows per dataset" if proto["quick_rows"] else "")
        + f". Code {', '.join(codes) or '—'}; {len(runs)} run(s), "
        + (f"load average {min(loads):.1f}–{max(loads):.1f} before each fit." if loads else ""),
        "Methods: " + "; ".join(f"`{m}` {labels[m]}" for m in methods) + ".",
        f"A tie is a test error within {TIE} point; W / T / L counts wins, ties and losses of "
        "the estimator against the peer; t/o: did not finish in the budget.",
    ]
    for half in HALVES + ("other",):
        sets = rows_of(results, half_of, half)
        if not sets:
            continue
        out += ["", f"## Half `{half}`: {len(sets)} datasets", ""]
        out += ["### Wins / ties / losses", ""] + win_tie_loss(sets, labels, scalenc, peers)
        crit = criteria(sets, labels, scalenc)
        out += (["", "### Issue 36's criteria", ""] + crit) if crit else []
        out += ["", "### Test error %", ""] + error_table(sets, labels, methods)
        out += ["", "### What the defaults chose", ""] + choices_table(sets, labels)
        out += ["", f"### Where scalenc is more than {TIE} point behind SVC or 5-NN", ""]
        out += losses(sets, labels, scalenc)
        fails = failures(sets, labels)
        out += (["", "### Failures and time-outs", ""] + fails) if fails else []
    return "\n".join(out)
