"""The command line's graph input (``--edges``, ``--edge-columns``): which commands and
estimators take it, checked before anything is read; the edges and the nodes' labels
opened; the graph as the JSON summary records it.

A graph is the encoder's input (:meth:`scalenc.encoder.EncoderClassifier.fit` with
``graph=``): ``scalenc fit encoder --edges PATH`` with ``--data`` (node features and
labels) or with ``--labels`` alone (the graph alone); ``scalenc predict`` / ``embed``
``--edges PATH`` with a model fitted so, which write every node's output, and ``scalenc
evaluate --edges PATH``, which scores its labeled nodes. ``scalenc report`` takes no
graph yet.
"""

from __future__ import annotations

import logging
import os

from scalenc.cli.errors import BadInput
from scalenc.cli.summary import plural
from scalenc.io.edges import EdgeList, as_edge_list, node_ids
from scalenc.io.inputs import load_columns, load_labels

__all__ = [
    "GRAPH_PARAMETERS",
    "edge_columns",
    "check_fit_graph",
    "check_model_graph",
    "refuse_graph_model",
    "open_graph",
    "open_node_labels",
    "open_node_ids",
    "check_label_sources",
    "graph_summary",
]

log = logging.getLogger("scalenc.cli")

#: The encoder's parameters that say how it reads a graph (recorded in the summary).
GRAPH_PARAMETERS = (
    "graph_fusion",
    "graph_normalize",
    "graph_laplacian",
    "graph_self_loops",
    "graph_directed",
)


def edge_columns(text: str | None) -> dict:
    """``--edge-columns SRC,DST[,WEIGHT]`` as :func:`~scalenc.io.edges.as_edge_list`'s
    ``source``, ``target`` and ``weight``: each a column name, or a position when it is a
    whole number.

    Examples
    --------
    >>> edge_columns("src,dst,w")
    {'source': 'src', 'target': 'dst', 'weight': 'w'}
    >>> edge_columns("0,1")
    {'source': 0, 'target': 1, 'weight': None}
    """
    if text is None:
        return {"source": 0, "target": 1, "weight": None}
    names = [name.strip() for name in text.split(",")]
    if len(names) not in (2, 3) or not all(names):
        raise BadInput(
            f"--edge-columns takes SRC,DST or SRC,DST,WEIGHT (names or positions, e.g. "
            f"src,dst,weight or 0,1); got {text!r}."
        )
    picked = [int(name) if name.isdigit() else name for name in names]
    return {"source": picked[0], "target": picked[1], "weight": (picked + [None])[2]}


def _no_edges(args) -> None:
    """``--edge-columns`` and ``--node-column`` only with ``--edges``; ``--edges`` only on
    the host."""
    edges = getattr(args, "edges", None)
    for flag, attr in (("--edge-columns", "edge_columns"), ("--node-column", "node_column")):
        if getattr(args, attr, None) and not edges:
            raise BadInput(
                f"{flag} {getattr(args, attr)} is about the graph of --edges; give --edges "
                f"PATH too, or drop {flag}."
            )
    if edges and getattr(args, "device", "cpu") != "cpu":
        raise BadInput(
            f"--device {args.device} cannot be used with --edges yet: the graph embedding "
            "is computed on the host, and joining it to features computed on a GPU is not "
            "supported. Drop --device."
        )


def check_fit_graph(args, cls, params: dict) -> None:
    """``scalenc fit`` with ``--edges``: the encoder only, fitted anew, without a
    checkpoint; without ``--data``, the labels from ``--labels``. Also refuses
    ``--edge-columns`` without ``--edges``. Nothing is read."""
    _no_edges(args)
    if not getattr(args, "edges", None):
        return
    if args.method != "encoder":
        raise BadInput(
            f"--edges is an input of the encoder only (`scalenc fit encoder --edges "
            f"{args.edges} ...`); {cls.__name__} (METHOD {args.method}) takes no graph."
        )
    if args.update:
        raise BadInput(
            "--update cannot take --edges: a model fitted with a graph keeps no running "
            "sums to update (its embedding needs every node's edges again). Fit it anew "
            "with --edges."
        )
    if params.get("checkpoint") is not None:
        flag = "--checkpoint" if args.checkpoint else "--set checkpoint"
        raise BadInput(
            f"{flag} cannot be used with --edges yet: a fit with a graph is not "
            "checkpointed (it reads the edges once, twice with graph_laplacian, and the "
            f"features at most three times). Drop {flag}."
        )
    for flag, given in (
        ("--restart-checkpoint", args.restart_checkpoint),
        ("--keep-checkpoint", args.keep_checkpoint),
    ):
        if given:
            raise BadInput(f"{flag} cannot be used with --edges: a graph fit has no checkpoint.")
    if args.data is None:
        _check_graph_alone(args)


def _check_graph_alone(args) -> None:
    """``fit --edges`` without ``--data``: the labels from ``--labels PATH``, and no option
    that reads ``--data``."""
    for flag, attr in (
        ("--feature-columns", "feature_columns"),
        ("--categorical", "categorical"),
        ("--handle-missing", "handle_missing"),
        ("--handle-unknown", "handle_unknown"),
    ):
        if getattr(args, attr, None) is not None:
            raise BadInput(
                f"{flag} applies to the table of --data; without --data (the graph alone) "
                "give the labels with --labels PATH (a .npy file or Zarr array, or a table "
                "with --label-column)."
            )
    if not args.labels:
        raise BadInput(
            "fit --edges without --data fits the graph alone and needs the nodes' labels: "
            "--labels PATH (a .npy file or Zarr array, one label per node, -1 for a node "
            "without one). Or give node features and labels with --data."
        )


def check_model_graph(args, est, command: str) -> None:
    """``scalenc predict``/``embed``/``evaluate``: ``--edges`` exactly when the model was
    fitted with a graph, and ``--data`` exactly when it was fitted with node features
    (``evaluate`` of a graph alone: the labels from ``--labels``)."""
    _no_edges(args)
    fitted_with_graph = bool(getattr(est, "_fitted_with_graph", False))
    edges = getattr(args, "edges", None)
    if edges and not fitted_with_graph:
        what = (
            "an EncoderClassifier fitted without a graph"
            if hasattr(est, "_fitted_with_graph")
            else f"a {type(est).__name__}, which takes no graph"
        )
        raise BadInput(
            f"--edges is for an encoder fitted with a graph (`scalenc fit encoder --edges`); "
            f"{args.model} holds {what}. Drop --edges."
        )
    if not fitted_with_graph:
        if args.data is None:
            raise BadInput(
                f"scalenc {command}: the following arguments are required: --data (the rows "
                f"to {command}; {args.model} holds {type(est).__name__}, fitted on features)."
            )
        return
    if not edges:
        alone = "on the graph alone" if not est.kernels_ else "with node features and a graph"
        raise BadInput(
            f"{args.model} was fitted {alone}: pass --edges PATH, the graph of the nodes to "
            f"{command} (the training graph gives every training node, the unlabeled ones "
            "too)" + ("." if est.kernels_ else "; it takes no --data.")
        )
    features = bool(est.kernels_)
    if features and args.data is None:
        raise BadInput(
            f"{args.model} was fitted with node features and a graph: pass --data (one row "
            "per node) beside --edges."
        )
    if not features and args.data is not None:
        raise BadInput(
            f"{args.model} was fitted on the graph alone: drop --data (with --edges alone, "
            f"every training node is given its output)."
        )
    if command == "evaluate" and args.data is None and not args.labels:
        raise BadInput(
            f"evaluate of {args.model}, fitted on the graph alone, needs the nodes' labels: "
            "--labels PATH (a .npy file or Zarr array, one label per node, -1 where unknown)."
        )


def refuse_graph_model(args, est, command: str) -> None:
    """``report`` takes no graph yet: a model fitted with one is refused with what to do
    instead."""
    if getattr(est, "_fitted_with_graph", False):
        raise BadInput(
            f"scalenc {command} takes no graph yet, and {args.model} was fitted with one. "
            "Score it with `scalenc evaluate --model MODEL --edges PATH ...`, or write its "
            "predictions with `scalenc predict --model MODEL --edges PATH ...`."
        )


def open_graph(args) -> dict:
    """``graph=`` the edge list of ``--edges`` (only metadata is read: Parquet footers,
    array headers), its columns as ``--edge-columns`` says, naming nodes by the ids of
    ``--node-column`` (:func:`open_node_ids`) when given; empty without ``--edges``."""
    if not getattr(args, "edges", None):
        return {}
    edges = as_edge_list(
        args.edges,
        **edge_columns(args.edge_columns),
        storage_options=args.storage_option,
        nodes=open_node_ids(args),
    )
    log.info(
        "edges %s: %d edges, %s, %s",
        args.edges,
        edges.n_edges,
        "weighted" if edges.weights is not None else "unweighted",
        plural(edges.ids.numblocks[0], "edge block"),
    )
    return {"graph": edges}


def check_label_sources(args) -> None:
    """With ``--data``, labels from ``--labels`` or from ``--label-column``, not both."""
    if getattr(args, "labels", None) and getattr(args, "label_column", None):
        raise BadInput(
            "--labels and --label-column both name the labels: give --label-column for a "
            "column of the --data table, or --labels for a separate array (with --label-"
            "column only for the --labels table of a graph alone, without --data)."
        )


def open_node_ids(args):
    """The node ids of ``--node-column`` (in memory, checked unique), from the ``--data``
    table or the ``--labels`` table of a graph alone; None without ``--node-column``."""
    column = getattr(args, "node_column", None)
    if column is None:
        return None
    table = args.data
    if table is None and getattr(args, "label_column", None):
        table = args.labels
    if table is None:
        raise BadInput(
            f"--node-column {column} names a column of a table of the nodes: of --data, or "
            "for a graph alone of --labels with --label-column."
        )
    (ids,) = load_columns(table, [column], storage_options=args.storage_option)
    nodes = node_ids(ids)
    log.info("nodes: %d ids from column %r of %s", nodes.size, column, table)
    return nodes


def open_node_labels(args):
    """The nodes' labels of ``--labels`` when the graph comes without ``--data``: an
    array, or the ``--label-column`` of a table."""
    if getattr(args, "label_column", None):
        if getattr(args, "node_column", None) == args.label_column:
            raise BadInput("--node-column and --label-column name the same column.")
        (y,) = load_columns(args.labels, [args.label_column], storage_options=args.storage_option)
        return y if args.chunk_rows is None else y.rechunk(args.chunk_rows)
    return load_labels(
        args.labels,
        chunk_rows=args.chunk_rows,
        allow_missing_chunks=getattr(args, "allow_missing_chunks", False),
        storage_options=args.storage_option,
    )


def graph_summary(args, edges: EdgeList, n_nodes: int, est=None) -> dict:
    """The summary's ``graph``: the edge list (path, columns, edge count), the nodes, and
    for a fit the encoder's graph options and the embeddings it compared and chose."""
    columns = edge_columns(args.edge_columns)
    out = {
        "edges": os.fspath(args.edges),
        "columns": {k: v for k, v in columns.items() if v is not None},
        "edge_count": edges.n_edges,
        "weighted": edges.weights is not None,
        "nodes": int(n_nodes),
    }
    if getattr(args, "labels", None) and getattr(args, "data", None) is None:
        out["labels"] = args.labels
    if getattr(args, "node_column", None):
        out["node_column"] = args.node_column
    if est is not None:
        params = est.get_params(deep=False)
        out["options"] = {name: params[name] for name in GRAPH_PARAMETERS}
        out["embeddings"] = list(est.embeddings_)
        out["embedding"] = est.embedding_
        out["edge_passes"] = int(est.n_edge_passes_)
    return out
