"""What the ``scalenc`` command prints on stdout: a short text summary, or the JSON summary.

Both are made from the same JSON-ready summary dict that :mod:`scalenc.cli.commands` builds
(``--format text``, the default, or ``--format json``; ``--json FILE`` writes the JSON to a
file as well).

Numbers in the JSON are rounded by one rule, :func:`rounded`: a float is written with the
fewest digits that read back to the same value at the precision it was computed in — the
shortest float32 digits for a value that float32 holds exactly (float32 results: ``0.3``,
not ``0.30000001192092896``), otherwise 12 significant digits (``1.0``, not
``0.9999999999999999``). Integers are exact.
"""

from __future__ import annotations

import json
import math

import numpy as np

__all__ = [
    "rounded",
    "to_json",
    "to_text",
    "plural",
]


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def rounded(value):
    """``value`` (JSON-ready: dicts, lists, str, int, float, bool, None) with every float
    rounded as the module docstring says."""
    if isinstance(value, float):
        if not math.isfinite(value) or value == 0.0:
            return value
        if abs(value) <= _FLOAT32_MAX and float(np.float32(value)) == value:
            return float(str(np.float32(value)))
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(item) for item in value]
    return value


def to_json(summary: dict) -> str:
    """The summary as indented JSON, numbers :func:`rounded`."""
    return json.dumps(rounded(summary), indent=2, allow_nan=False)


def plural(count: int, word: str, words: str | None = None) -> str:
    """``"1 block"``, ``"3 blocks"``."""
    return f"{count} {word if count == 1 else words or word + 's'}"


def _seconds(value) -> str:
    if value is None:
        return "?"
    if value < 60:
        return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"
    minutes, secs = divmod(int(round(value)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _num(value) -> str:
    return "?" if value is None else f"{value:.4g}"


def _score(value) -> str:
    return "?" if value is None else f"{value:.4f}"


def _data(data: dict | None, graph: dict | None = None) -> str:
    """The data a command read: its path and size, or the graph's nodes without features."""
    if not data:
        return "" if not graph else f"the graph {graph['edges']} ({_graph_size(graph)})"
    return (
        f"{data['path']} ({data['rows']} rows × {plural(data['features'], 'feature')}, "
        f"{plural(data['row_blocks'], 'row block')})"
    )


def _graph_size(graph: dict) -> str:
    return f"{plural(graph['nodes'], 'node')}, {plural(graph['edge_count'], 'edge')}"


def _graph(graph: dict | None, in_head: bool) -> list[str]:
    """The graph line of a fit (the embedding chosen is in the model's line) or of an
    output of every node: its path and size unless the headline has them, a fit's
    options, the labels of a graph alone."""
    if not graph:
        return []
    options = graph.get("options") or {}
    parts = [] if in_head else [f"{graph['edges']} ({_graph_size(graph)})"]
    if options:
        on = [k.removeprefix("graph_") for k, v in options.items() if v is True]
        parts.append(f"fusion {options.get('graph_fusion')}, {', '.join(on) or 'plain A W'}")
    if graph.get("labels"):
        parts.append(f"labels {graph['labels']}")
    return [f"graph: {'; '.join(parts)}"] if parts else []


def _graph_passes(s: dict, seconds_key: str) -> str:
    """A command's passes over the data and, with a graph, over the edges, and its time."""
    text = _passes(s, seconds_key)
    edge_passes = (s.get("graph") or {}).get("edge_passes")
    if not edge_passes:
        return text
    over = plural(edge_passes, "pass", "passes") + " over the edges"
    if s.get("passes"):
        return text.replace(" over the data", f" over the data, {over}", 1)
    return f"{over} in {_seconds((s.get('timings') or {}).get(seconds_key))}"


def _passes(summary: dict, seconds_key: str | None = None) -> str:
    passes = summary.get("passes")
    text = "" if passes is None else plural(passes, "pass", "passes") + " over the data"
    seconds = (summary.get("timings") or {}).get(seconds_key) if seconds_key else None
    if seconds is not None:
        text += f"{' in ' if text else ''}{_seconds(seconds)}"
    return text


# How the paper reads its diagnostics (Hu, Pan & Wu), the source of every threshold below:
# * ε ≥ 1 (Definition 7, Proposition 9): ε − 1 = ‖F − D*A‖² / ‖D*A‖², the squared residual
#   of the class indicators F relative to the fitted part; 1 is an exact fit. A larger basis
#   (higher t) or a smaller λ lowers it and raises γ (Theorem 18, Section 7.2.3).
# * γ ≥ 1 (Definition 5): by Proposition 7, γ is the mean of 1/σ̃ᵢ² over the directions of A
#   weighted by the target's share in each, so γ = r when the singular values are uniform
#   (Corollary 19) and an ideal nRBFN fit has K ≤ γ ≤ r (Corollary 11). γ > r means the fit
#   leans on directions weaker than average, a warning of overfitting (Section 5.1.1), held
#   in check by the ridge λ. The paper's cross-validated fits keep λγ below 1e-2 (nRBFN) and
#   1e-1 (LRC) (Section 7.2.2, Table 6), where ε + λγ ≈ ε: the error, not the risk, decides.
# * A rank below r (rank(W̃) < r) makes the unregularised fit fail (Section 7.2.1): λ > 0
#   is what makes it solvable.
_TUNED_LAMBDA_GAMMA = {"nrbfn": 1e-2, "lrc": 1e-1}


def _length(value) -> int | None:
    """The length of a list or of an array :func:`scalenc.report.jsonable` summarised."""
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict):
        return (value.get("shape") or [value.get("length")])[0]
    return None


def _columns(value) -> int | None:
    """The columns of a matrix, as a nested list or :func:`scalenc.report.describe.jsonable`'s
    shape summary."""
    if isinstance(value, dict):
        shape = value.get("shape") or []
        return shape[1] if len(shape) > 1 else None
    if isinstance(value, list) and value and isinstance(value[0], list):
        return len(value[0])
    return None


def _percent(fraction: float) -> str:
    """``4.4 %``, ``0.0012 %``, ``115 %``."""
    value = 100 * fraction
    return f"{value:.2g} %" if value < 10 else f"{value:.0f} %"


def _cross_entropy(model: dict) -> str:
    """`` (cross-entropy per labeled row: linear 0.03, euclidean 0.05 (sample), …;
    guessing: log K = …)``: the sums c_m of the JSON divided by the labeled rows they were
    summed over, each with its kind where it is not exact."""
    per_row = model.get("cross_entropy_per_row") or {}
    if len(per_row) < 2 or all(value is None for value in per_row.values()):
        return ""
    kinds = model.get("cross_entropy_kind_") or {}
    detail = ", ".join(
        f"{name} {_num(value)}"
        + ("" if kinds.get(name, "exact") == "exact" else f" ({kinds[name]})")
        for name, value in per_row.items()
    )
    n_classes = _length(model.get("classes_"))
    chance = f"; guessing: log {n_classes} = {math.log(n_classes):.4g}" if n_classes else ""
    return f" (cross-entropy per labeled row: {detail}{chance})"


def _fitting_error(value, lever: str) -> str:
    """ε = ‖F − D*A‖²_F / ‖D*A‖²_F + 1 with its reading (Definition 7, eq. 23): how far the
    regression's class scores D*A are from the one-hot labels F. It reads the scores, not
    the accuracy: a row is classified right whenever its own class scores highest."""
    if value is None:
        return "fitting error ε = ?"
    if value <= 1.0:
        return f"fitting error ε = {_num(value)}: the class scores equal the one-hot labels"
    return (
        f"fitting error ε = {_num(value)}: the class scores miss the one-hot labels by a "
        f"squared residual of {_percent(value - 1.0)} of their own (ε − 1, Definition 7). "
        "ε = 1 only where the scores equal the labels, which a fit with λ > 0 never "
        "reaches; it reads the scores, not the accuracy (ε > 1 at 100 % training "
        f"accuracy is usual); {lever} lowers it"
    )


def _spectral_risk(value, size: int | None, lam, method: str, what: str) -> str:
    """γ with its reading against the size r of A and the product λγ (Section 5)."""
    text = f"spectral risk γ = {_num(value)}"
    if value is None or not size:
        return text
    if value <= size:
        return (
            f"{text} ≤ r = {size}: the fit uses strong directions of the {what} "
            "(low risk of overfitting)"
        )
    text += f" > r = {size}: the fit leans on weak directions of the {what} (overfitting warning)"
    if not isinstance(lam, (int, float)) or isinstance(lam, bool):
        return text
    limit = _TUNED_LAMBDA_GAMMA[method]
    if lam * value <= limit:
        return (
            f"{text}; λγ = {lam * value:.2g} ≤ {limit:g}, as in the paper's tuned fits (ε decides)"
        )
    advice = 'alpha="cv"' if method == "nrbfn" else "other alpha values"
    return f"{text}; λγ = {lam * value:.2g} > {limit:g}, above the paper's tuned fits: try {advice}"


def _rank(rank, size: int | None, rows: str) -> str:
    """The numerical rank of A against its r rows: ``full rank``, or how many are redundant."""
    if rank is None or not size:
        return ""
    if rank >= size:
        return "full rank"
    return f"rank {rank}: {plural(size - rank, rows)} redundant, so λ > 0 is needed"


def _regression_results(model: dict, params: dict | None) -> list[str]:
    """nRBFN's and LRC's basis, ε, γ and rank, each with its reading."""
    lines = []
    nrbfn = "basis_indices_" in model
    if nrbfn:
        basis = model.get("basis_") or {}
        size = basis.get("shape", [None])[0] if isinstance(basis, dict) else len(basis)
        fraction = model.get("basis_fraction_")
        share = f" ({100 * fraction:.1f} % of the labeled rows)" if fraction is not None else ""
        rank = _rank(model.get("rank_"), size, "basis row")
        lines.append(
            f"basis: {size} rows{share}{', ' + rank if rank else ''}; "
            f"σ = {_num(model.get('sigma_'))}, λ = {_num(model.get('alpha_'))}"
        )
        lever = "a higher confidence_threshold or a smaller alpha"
        lam, what = model.get("alpha_"), "basis"
    else:
        size = _columns(model.get("weights_"))  # D* is K × (p + 1): r = p + 1 rows of Ã
        lam, lever, what = (params or {}).get("alpha"), "a smaller alpha", "data"
    lines.append(_fitting_error(model.get("fitting_error_"), lever))
    method = "nrbfn" if nrbfn else "lrc"
    lines.append(_spectral_risk(model.get("spectral_risk_"), size, lam, method, what))
    if not nrbfn:
        rank = _rank(model.get("rank_"), size, "feature")
        if rank:
            lines.append(f"features and intercept (r = p + 1 = {size} rows): {rank}")
    return lines


def _model_results(model: dict | None, params: dict | None = None) -> list[str]:
    """The fitted attributes a user looks at first, by estimator (``describe_model``)."""
    if not model:
        return []
    lines = []
    if "embedding_" in model:  # an encoder fitted with a graph
        lines.append(f"embedding chosen: {model['embedding_']}{_cross_entropy(model)}")
    elif "kernel_" in model:
        lines.append(f"kernel chosen: {model['kernel_']}{_cross_entropy(model)}")
    if "spectral_risk_" in model:
        lines += _regression_results(model, params)
    # CCDRClassifier's embedding is its transformer's (``ccdr_``): its eigenvalues and
    # heat-kernel scale are read there
    ccdr = model.get("ccdr_") or {}
    eig = model.get("eigenvalues_", ccdr.get("eigenvalues_"))
    if eig is not None:
        shown = ", ".join(_num(v) for v in eig[:3]) + (", …" if len(eig) > 3 else "")
        head = f"; classifier: {params['classifier']}" if params and "classifier" in params else ""
        epsilon = model.get("epsilon_", ccdr.get("epsilon_"))
        scale = "" if epsilon is None else f", ε = {_num(epsilon)}"
        lines.append(
            f"embedding: {plural(len(eig), 'component')}{scale}, eigenvalues {shown}{head}"
        )
    return lines


def _scores(scores: dict | None) -> list[str]:
    if not scores:
        return []
    line = (
        f"accuracy {_score(scores.get('accuracy'))} on {scores.get('labeled_rows')} labeled "
        f"rows (balanced {_score(scores.get('balanced_accuracy'))}, macro F1 "
        f"{_score((scores.get('macro_avg') or {}).get('f1'))})"
    )
    lines = [line]
    if scores.get("unknown_label_rows"):
        lines.append(
            f"{plural(scores['unknown_label_rows'], 'labeled row')} with a class the model was "
            "not fitted on (counted as errors)"
        )
    return lines


def _fit(s: dict):
    head = f"fit {s['method']} ({s['estimator']}) on {_data(s.get('data'), s.get('graph'))}"
    if s.get("update"):
        update = s["update"]
        count = update.get("updates")  # None: a model that does not count its updates
        head = (
            f"updated {s['method']} ({s['estimator']}) model {update['model']} with "
            f"{_data(s.get('data'))}{'' if count is None else f' (update {count} since its fit)'}"
        )
    timings = s.get("timings", {})
    body = _graph(s.get("graph"), in_head=not s.get("data"))
    body += _model_results(s.get("model"), s.get("params"))
    save = _seconds(timings.get("save_seconds"))
    body.append(f"{_graph_passes(s, 'fit_seconds')}; model saved in {save}")
    if s.get("checkpoint"):
        body.append(_checkpoint(s["checkpoint"]))
    return head, body


def _checkpoint(c: dict) -> str:
    """What a checkpointed fit read back from its checkpoint and what it computed."""
    attempts = c.get("attempts", 1)
    after = f" after {plural(attempts, 'attempt')} (lost tasks)" if attempts > 1 else ""
    if not c.get("resumed"):
        return f"checkpoint {c.get('path')}: a new fit, nothing to reuse"
    total = c.get("blocks_reused", 0) + c.get("blocks_computed", 0)
    return (
        f"checkpoint {c.get('path')}: resumed{after}, "
        f"{plural(c.get('passes_reused', 0), 'finished pass', 'finished passes')} and "
        f"{plural(c.get('groups_reused', 0), 'group')} of row blocks read back; "
        f"{c.get('blocks_computed', 0)} of {total} block reads computed"
    )


def _predict(s: dict):
    out = s["output"]
    kind = {"probabilities": "class probabilities"}.get(out["kind"], out["kind"])
    data = _data(s.get("data"), s.get("graph"))
    head = f"{s['command']} {data} with {s['model']} ({s['estimator']}): {kind}"
    key = "predict_seconds" if s["command"] == "predict" else "embed_seconds"
    return head, [*_graph(s.get("graph"), in_head=not s.get("data")), _graph_passes(s, key)]


def _evaluate(s: dict):
    head = f"evaluate {s['model']} ({s['estimator']}) on {_data(s.get('data'), s.get('graph'))}"
    graph = _graph(s.get("graph"), in_head=not s.get("data"))
    return head, [*graph, *_scores(s.get("scores")), _graph_passes(s, "evaluate_seconds")]


def _info(s: dict):
    head = f"info {s['model']}: {s['estimator']}"
    classes = s.get("classes")
    body = []
    if classes:
        shown = ", ".join(map(str, classes[:10])) + (", …" if len(classes) > 10 else "")
        body.append(f"classes ({len(classes)}): {shown}")
    body += _model_results(s.get("fitted"), s.get("params"))
    files = s.get("files", {})
    versions = s.get("versions") or {}
    made = f"; saved {s['created']}" if s.get("created") else ""
    made += f" with scalenc {versions['scalenc']}" if versions.get("scalenc") else ""
    body.append(
        f"{plural(files.get('arrays', 0), 'array file')}, {files.get('bytes', 0) / 1024:.0f} KB, "
        f"checksums {files.get('checksums')}{made}"
    )
    return head, body


def _make_data(s: dict):
    head = (
        f"make-data {s['setting']}: {s['rows']} rows × {plural(s['features'], 'feature')}, "
        f"{plural(s['classes'], 'class', 'classes')}, seed {s['seed']}, {s['dtype']}, "
        f"{plural(s['row_blocks'], 'row block')}"
    )
    return head, [f"written in {_seconds(s.get('timings', {}).get('write_seconds'))}"]


def _convert(s: dict):
    out = (s.get("outputs") or {}).get("data")
    head = f"convert {_data(s.get('data'))} to {out}"
    return head, [f"written in {_seconds(s.get('timings', {}).get('write_seconds'))}"]


def _report(s: dict):
    head = f"report on {s['model']} ({s['estimator']})"
    if s.get("data"):
        head += f" with {_data(s['data'])}"
    timings = s.get("timings", {})
    render = f"rendered in {_seconds(timings.get('render_seconds'))}"
    passes = _passes(s)
    return head, [*_scores(s.get("scores")), f"{passes}; {render}" if passes else render]


_RENDERERS = {
    "fit": _fit,
    "predict": _predict,
    "embed": _predict,
    "evaluate": _evaluate,
    "info": _info,
    "make-data": _make_data,
    "convert": _convert,
    "report": _report,
}


def _render(s: dict):
    """(headline, detail lines) of one command's summary; a bare headline if a key is
    missing, so that the text never fails a command whose work is done."""
    try:
        return _RENDERERS[s["command"]](s)
    except (KeyError, TypeError, IndexError, ValueError):
        return f"{s.get('command')}: {s.get('status')}", []


def _outputs(s: dict) -> list[str]:
    return [f"{name}: {path}" for name, path in (s.get("outputs") or {}).items()]


def _step_results(step: dict) -> list[str]:
    """A job step's key result under its line: the kernel or embedding a fit chose, the
    accuracy an evaluation or report scored."""
    try:
        if step["command"] == "fit":
            model = step.get("model") or {}
            chosen = "embedding_" in model or "kernel_" in model
            return _model_results(model, step.get("params"))[:1] if chosen else []
        if step["command"] in ("evaluate", "report"):
            return _scores(step.get("scores"))[:1]
    except (KeyError, TypeError, IndexError, ValueError):
        pass
    return []


def _run(s: dict, lines: list[str]) -> None:
    steps = s.get("steps", [])
    lines.append(f"run {s.get('job', '')}: {plural(len(steps), 'step')} in {s.get('workdir', '')}")
    for step in steps:
        name = f"step {step['step']} ({step['command']})"
        if step.get("status") != "ok":
            error = step.get("error") or {}
            lines.append(f"  {name} failed (exit {error.get('exit_code')}): {error.get('message')}")
            continue
        head, _ = _render(step)
        outputs = ", ".join(str(p) for p in (step.get("outputs") or {}).values())
        lines.append(f"  {name} {_seconds(step.get('seconds'))}: {head}")
        lines += [f"      {line}" for line in _step_results(step)]
        if outputs:
            lines.append(f"      → {outputs}")


def to_text(summary: dict, json_path: str | None = None) -> str:
    """A few lines for a person: what ran, its key results, times and output paths.

    Empty for a failed command (the log on stderr says why), except for ``run``, whose
    finished steps are listed with the one that failed.
    """
    command = summary.get("command")
    lines: list[str] = []
    if command == "run":
        if not summary.get("steps"):
            return ""
        _run(summary, lines)
    elif summary.get("status") != "ok":
        return ""
    else:
        head, body = _render(summary)
        lines.append(head)
        lines += [f"  {line}" for line in body if line]
        lines += [f"  {line}" for line in _outputs(summary)]
    where = summary.get("scheduler") or {}
    on = f" on {where['address']}" if where.get("kind") == "distributed" else ""
    status = "done" if summary.get("status") == "ok" else "failed"
    lines.append(f"{status} in {_seconds(summary.get('seconds'))}{on}")
    if json_path:
        lines.append(f"JSON summary: {json_path}")
    return "\n".join(lines) + "\n"
