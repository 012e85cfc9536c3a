"""The graph encoder embedding (GraphEmd's Z = A W) out of core, against two oracles
written here from GraphEmd's ``GraphEncoder.m``: its edge loop transcribed literally, and
its matrix formula with SciPy; each option, several edge and node chunkings, every
scheduler; and the edge lists it refuses."""

from __future__ import annotations

import itertools

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scalenc.encoder.graph import GraphOptions, graph_embedding
from scalenc.exceptions import InputError
from scalenc.io.edges import EdgeList, as_edge_list

OPTIONS = [
    GraphOptions(laplacian=lap, normalize=norm, self_loops=loops, directed=directed)
    for lap, norm, loops, directed in itertools.product([False, True], repeat=4)
]


def option_id(o: GraphOptions) -> str:
    names = ("laplacian", "normalize", "self_loops", "directed")
    return "-".join(name for name in names if getattr(o, name)) or "plain"


# --- the oracles ---------------------------------------------------------------------------


def graphemd_loop(edges, weights, labels, options: GraphOptions) -> np.ndarray:
    """GraphEmd's ``GraphEncoder.m`` edge-list path, transcribed loop for loop (0-based
    ids, class codes 0 … K−1 and −1 for an unknown label instead of its 1 … K and ≤ 0)."""
    n, K = labels.size, labels.max() + 1
    X = [(int(a), int(b), float(c)) for (a, b), c in zip(edges, weights)]
    if options.self_loops:  # DiagA: X = [X; (1:n, 1:n, 1)]
        X += [(i, i, 1.0) for i in range(n)]
    if options.laplacian:
        D = np.zeros(n)
        for a, b, c in X:
            D[a] += c
            if a != b:
                D[b] += c
        with np.errstate(divide="ignore"):
            D = D**-0.5
        X = [(a, b, c * D[a] * D[b]) for a, b, c in X]
    nk = np.bincount(labels[labels >= 0], minlength=K)
    W = np.zeros((n, K))
    for i in range(n):
        if labels[i] >= 0:
            W[i, labels[i]] = 1 / nk[labels[i]]
    di = 2 if options.directed else 1
    Z = np.zeros((n, K * di))
    for a, b, e in X:
        c, d = labels[a], labels[b]
        if d >= 0:
            Z[a, d] += W[b, d] * e
        if c >= 0 and a != b:
            Z[b, c + (di > 1) * K] += W[a, c] * e
    if options.normalize:  # normalize(Z, 2, 'norm'), NaN set to 0
        for i in range(di):
            part = Z[:, i * K : (i + 1) * K]
            with np.errstate(invalid="ignore"):
                part /= np.linalg.norm(part, axis=1, keepdims=True)
        Z[np.isnan(Z)] = 0
    return Z


def graphemd_matrix(edges, weights, labels, options: GraphOptions) -> np.ndarray:
    """The same as SciPy sparse algebra: Z = (A + Aᵀ − diag A) W (undirected) or
    [A W | (Aᵀ − diag A) W] (directed), with A + I, D^−½ · D^−½ and row norms."""
    n, K = labels.size, labels.max() + 1
    A = sp.coo_matrix((weights, (edges[:, 0], edges[:, 1])), shape=(n, n)).tocsr()
    if options.self_loops:
        A = A + sp.eye(n)
    At = A.T - sp.diags(A.diagonal())
    if options.laplacian:
        d = np.asarray((A + At).sum(axis=1)).ravel()
        s = sp.diags(np.divide(1.0, np.sqrt(d), out=np.zeros(n), where=d > 0))
        A, At = s @ A @ s, s @ At @ s
    labeled = labels >= 0
    W = np.zeros((n, K))
    W[labeled, labels[labeled]] = 1 / np.bincount(labels[labeled])[labels[labeled]]
    halves = [A @ W, At @ W] if options.directed else [(A + At) @ W]
    out = []
    for Z in map(np.asarray, halves):
        if options.normalize:
            norm = np.linalg.norm(Z, axis=1, keepdims=True)
            Z = np.divide(Z, norm, out=np.zeros_like(Z), where=norm > 0)
        out.append(Z)
    return np.hstack(out)


def small_graph(seed=0, n=40, s=220, K=3):
    """A weighted graph with duplicates, self-loops, isolated and unlabeled nodes."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, n - 3, (s, 2))  # the last three nodes have no edges
    edges[:5, 1] = edges[:5, 0]  # self-loops
    edges[5:10] = edges[10:15]  # duplicate edges
    weights = rng.uniform(0.1, 2.0, s)
    labels = rng.integers(0, K, n)
    labels[rng.random(n) < 0.3] = -1
    labels[:K] = np.arange(K)  # every class labeled
    return edges, weights, labels


def embed(edges, weights, labels, options, *, edge_chunks, node_chunks, **kw):
    edge_list = as_edge_list(np.column_stack([edges, weights]), chunk_edges=edge_chunks)
    codes = da.from_array(labels, chunks=node_chunks)
    counts = np.bincount(labels[labels >= 0])
    return graph_embedding(edge_list, codes, counts, options, **kw)


# --- the embedding against the oracles -----------------------------------------------------


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
def test_oracles_agree(options):
    """The two oracles agree, so each is GraphEmd's algorithm read the same way."""
    edges, weights, labels = small_graph()
    loop = graphemd_loop(edges, weights, labels, options)
    matrix = graphemd_matrix(edges, weights, labels, options)
    np.testing.assert_allclose(matrix, loop, rtol=0, atol=1e-12)


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
@pytest.mark.parametrize(
    "edge_chunks, node_chunks, split_every",
    [(10_000, 10_000, 8), (37, 7, 2), (64, (13, 1, 20, 6), 3)],
    ids=["one-block", "many", "irregular"],
)
def test_embedding_equals_graphemd(options, edge_chunks, node_chunks, split_every):
    edges, weights, labels = small_graph()
    with dask.config.set({"scalenc.split-every": split_every}):
        Z = embed(edges, weights, labels, options, edge_chunks=edge_chunks, node_chunks=node_chunks)
    assert Z.chunks[0] == da.from_array(labels, chunks=node_chunks).chunks[0]
    expected = graphemd_loop(edges, weights, labels, options)
    np.testing.assert_allclose(Z.compute(), expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
@pytest.mark.parametrize("node_chunks", [7, (13, 1, 20, 6)], ids=["even", "irregular"])
def test_unweighted_edges_are_counted_then_scaled(options, node_chunks):
    """Without weights the edge blocks count contributions (exact integers) and each node
    block scales its counts by 1/n_k: the same embedding as weights of 1."""
    edges, _, labels = small_graph()
    edge_list = as_edge_list(edges, chunk_edges=37)
    assert edge_list.weights is None
    codes = da.from_array(labels, chunks=node_chunks)
    counts = np.bincount(labels[labels >= 0])
    with dask.config.set({"scalenc.split-every": 3}):
        Z = graph_embedding(edge_list, codes, counts, options)
    expected = graphemd_loop(edges, np.ones(len(edges)), labels, options)
    np.testing.assert_allclose(Z.compute(), expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "options", [GraphOptions(), GraphOptions(laplacian=True, directed=True)], ids=option_id
)
def test_embedding_under_every_scheduler(scheduler, options):
    edges, weights, labels = small_graph(seed=1)
    Z = embed(edges, weights, labels, options, edge_chunks=29, node_chunks=11)
    np.testing.assert_allclose(
        Z.compute(), graphemd_matrix(edges, weights, labels, options), rtol=0, atol=1e-10
    )


@pytest.mark.cluster
def test_embedding_on_a_distributed_cluster(client):
    options = GraphOptions(laplacian=True, self_loops=True)
    edges, weights, labels = small_graph(seed=2)
    Z = embed(edges, weights, labels, options, edge_chunks=31, node_chunks=9)
    np.testing.assert_allclose(
        Z.compute(), graphemd_matrix(edges, weights, labels, options), rtol=0, atol=1e-10
    )


def _most_parts_and_sums_held(Z: da.Array) -> int:
    """The most edge blocks' parts and node blocks' partial sums held at once when Z's
    column sums are computed in dask.order's order (a result is freed once its last
    dependent has run)."""
    from dask.core import get_dependencies
    from dask.order import order
    from dask.utils import key_split

    graph = dict(Z.sum(axis=0).__dask_graph__())
    deps = {key: get_dependencies(graph, key) for key in graph}
    waiting = {key: 0 for key in graph}
    for key in graph:
        for dep in deps[key]:
            waiting[dep] += 1
    priority = order(graph)
    held, most = set(), 0
    for key in sorted(graph, key=priority.__getitem__):
        if key_split(key) in ("embedding_parts", "getitem", "sum_parts", "_fold_step"):
            held.add(key)
        for dep in deps[key]:
            waiting[dep] -= 1
            if waiting[dep] == 0:
                held.discard(dep)
        most = max(most, len(held))
    return most


def test_the_pass_holds_one_group_of_edge_blocks_whatever_their_number():
    """Memory flat in the number of edges: the node blocks fold the edge blocks' parts
    into their sums together, so the pass holds the same parts and sums with 8 edge
    blocks or 96 (a tree of sums held 15 and 35, a fold node block by node block 13
    and 101)."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, 400)
    counts = np.bincount(labels)
    codes = da.from_array(labels, chunks=100)
    held = []
    for n_blocks in (8, 96):
        edges = as_edge_list(rng.integers(0, 400, (n_blocks * 10, 2)), chunk_edges=10)
        with dask.config.set({"scalenc.split-every": 4}):
            Z = graph_embedding(edges, codes, counts, GraphOptions())
        held.append(_most_parts_and_sums_held(Z))
    # dask.order breaks ties by key names, some of which are random tokens: 8 or 11 held
    # with 8 edge blocks, 11 with 96 (a tree of sums: 35 with 96, an ungated fold: 101)
    assert held[1] <= min(held[0] + 4, 14), held


def test_unlabeled_neighbourhood_gives_a_zero_row():
    """A node with no labeled neighbour (here: no edges at all) has a zero embedding."""
    edges, weights, labels = small_graph()
    Z = embed(edges, weights, labels, GraphOptions(), edge_chunks=50, node_chunks=10).compute()
    assert not Z[-3:].any() and np.isfinite(Z).all()


# --- the edge list's forms -----------------------------------------------------------------


def test_every_form_of_edge_list_gives_the_same_embedding(tmp_path):
    edges, weights, labels = small_graph()
    options = GraphOptions(normalize=False)
    expected = graphemd_matrix(edges, weights, labels, options)
    frame = pd.DataFrame({"w": weights, "src": edges[:, 0], "dst": edges[:, 1]})
    frame.to_parquet(tmp_path / "edges.parquet")
    np.save(tmp_path / "edges.npy", np.column_stack([edges, weights]))
    import dask.dataframe as dd
    import zarr

    z = zarr.open_array(tmp_path / "edges.zarr", mode="w", shape=(len(edges), 3), chunks=(50, 3))
    z[:] = np.column_stack([edges, weights])
    adjacency = sp.coo_matrix((weights, (edges[:, 0], edges[:, 1])), shape=(labels.size,) * 2)
    forms = {
        "numpy": np.column_stack([edges, weights]),
        "dask": da.from_array(np.column_stack([edges, weights]), chunks=(33, 3)),
        "zarr": z,
        "zarr path": str(tmp_path / "edges.zarr"),
        "npy path": str(tmp_path / "edges.npy"),
        "sparse": adjacency,
        "pandas by name": (frame, {"source": "src", "target": "dst", "weight": "w"}),
        "dask frame by position": (
            dd.from_pandas(frame, npartitions=3),
            {"source": 1, "target": 2, "weight": 0},
        ),
        "parquet": (
            str(tmp_path / "edges.parquet"),
            {"source": "src", "target": "dst", "weight": "w"},
        ),
    }
    codes = da.from_array(labels, chunks=16)
    counts = np.bincount(labels[labels >= 0])
    for name, form in forms.items():
        source, kwargs = form if isinstance(form, tuple) else (form, {})
        edge_list = as_edge_list(source, **kwargs)
        assert isinstance(edge_list, EdgeList)
        Z = graph_embedding(edge_list, codes, counts, options).compute()
        np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-10, err_msg=name)


def test_parquet_written_by_pyarrow_is_read_by_row_group(tmp_path):
    """A dataset of two files without pandas metadata: one edge block per row group (only
    the footers read up front), columns by name or position, no warning."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    edges, weights, labels = small_graph(seed=4)
    expected = graphemd_matrix(edges, weights, labels, GraphOptions())
    (tmp_path / "e.parquet").mkdir()
    for part, rows in enumerate((slice(0, 100), slice(100, None))):
        table = pa.table({"w": weights[rows], "a": edges[rows, 0], "b": edges[rows, 1]})
        pq.write_table(table, tmp_path / "e.parquet" / f"{part}.parquet", row_group_size=40)
    codes = da.from_array(labels, chunks=16)
    counts = np.bincount(labels[labels >= 0])
    for kwargs in (
        {"source": "a", "target": "b", "weight": "w"},
        {"source": 1, "target": 2, "weight": 0},
    ):
        edge_list = as_edge_list(str(tmp_path / "e.parquet"), **kwargs)
        assert edge_list.ids.chunks[0] == (40, 40, 20, 40, 40, 40) == edge_list.weights.chunks[0]
        Z = graph_embedding(edge_list, codes, counts, GraphOptions()).compute()
        np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-10)


def test_two_columns_weigh_one_and_a_frame_without_weight_column_too():
    edges, _, labels = small_graph()
    ones = np.ones(len(edges))
    expected = graphemd_matrix(edges, ones, labels, GraphOptions())
    frame = pd.DataFrame({"a": edges[:, 0], "b": edges[:, 1], "t": np.arange(len(edges))})
    codes, counts = da.from_array(labels, chunks=16), np.bincount(labels[labels >= 0])
    for source in (edges, frame):
        edge_list = as_edge_list(source)
        assert edge_list.weights is None
        Z = graph_embedding(edge_list, codes, counts, GraphOptions()).compute()
        np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-10)


# --- bad edge lists ------------------------------------------------------------------------


def compute_embedding(edges, labels, options=None, weights=None):
    options = GraphOptions() if options is None else options
    edge_list = as_edge_list(
        edges if weights is None else np.column_stack([edges, weights]), chunk_edges=4
    )
    labels = np.asarray(labels)
    codes = da.from_array(labels, chunks=3)
    return graph_embedding(edge_list, codes, np.bincount(labels[labels >= 0]), options).compute()


LABELS = [0, 1, 0, 1, -1, 0]


@pytest.mark.parametrize(
    "edges, match",
    [
        (
            [[0, 1], [1, 2], [2, 3], [3, 4], [5, -1]],
            r"Edge 4 joins nodes 5 and -1: node ids must "
            r"be 0 … n−1, never negative",
        ),
        (
            [[0, 1], [1, 7]],
            r"Edge 1 joins nodes 1 and 7, but the graph has 6 nodes \(ids 0 … 5\): one "
            r"per label at fit; .* Give every node up to 7 a label at fit",
        ),
        ([[0, 1], [1.5, 2]], r"Edge 1 has node ids \[1\.5, 2\.0\]: node ids must be whole"),
        ([[0, 1], [np.nan, 2]], r"Edge 1 has node ids \[nan, 2\.0\]"),
    ],
    ids=["negative", "beyond-labels", "fractional", "nan"],
)
def test_bad_ids_are_refused(edges, match):
    with pytest.raises(InputError, match=match):
        compute_embedding(np.array(edges), LABELS)


def test_string_ids_empty_graphs_and_bad_shapes_are_refused():
    with pytest.raises(
        InputError,
        match=r"Node ids must be integers 0 … n−1, or ids listed by nodes=; .* dtype <U1\. "
        r"Pass nodes=",
    ):
        graph_embedding(
            as_edge_list(np.array([["a", "b"]])), da.zeros(2, dtype=int), np.ones(1), OPTIONS[0]
        )
    with pytest.raises(InputError, match=r"The graph has no edges \(an edge list of 0 rows\)"):
        as_edge_list(np.zeros((0, 2), dtype=np.int64))
    with pytest.raises(
        InputError,
        match=r"got shape \(2, 5\)\. It looks transposed: pass "
        r"edges\.T",
    ):
        as_edge_list(np.zeros((2, 5), dtype=np.int64))
    with pytest.raises(InputError, match=r"A sparse adjacency must be square"):
        as_edge_list(sp.eye(3, 4, format="csr"))
    frame = pd.DataFrame({"a": [0], "b": [1]})
    with pytest.raises(
        InputError,
        match=r"The edge table has no target column 'c'; its "
        r"columns are \['a', 'b'\]",
    ):
        as_edge_list(frame, target="c")
    with pytest.raises(
        InputError,
        match=r"The weight column is position 2, but the edge "
        r"table has 2 columns",
    ):
        as_edge_list(frame, weight=2)


def test_bad_weights_are_refused():
    edges = np.array([[0, 1], [1, 2], [2, 3]])
    with pytest.raises(
        InputError,
        match=r"Edge 2 \(2, 3\) has weight inf: edge weights must "
        r"be finite\.$",
    ):
        compute_embedding(edges, LABELS, weights=[1.0, 2.0, np.inf])
    with pytest.raises(
        InputError,
        match=r"Edge 1 \(1, 2\) has weight -2\.0: edge weights "
        r"must be finite and non-negative \(the Laplacian's degrees\)",
    ):
        compute_embedding(edges, LABELS, GraphOptions(laplacian=True), weights=[1.0, -2.0, 1.0])
    # without the Laplacian, negative weights are a weighted graph like any other
    Z = compute_embedding(edges, LABELS, GraphOptions(normalize=False), weights=[1.0, -2.0, 1.0])
    expected = graphemd_matrix(
        edges, np.array([1.0, -2.0, 1.0]), np.array(LABELS), GraphOptions(normalize=False)
    )
    np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-12)


def test_self_loops_and_duplicates_are_kept_as_graphemd_keeps_them():
    """A self-loop adds its weight once to its node's own class column; a duplicate edge
    adds its weight again (GraphEmd's loop, which these documented rules restate)."""
    labels = np.array([0, 1, 0])
    counts = np.array([2.0, 1.0])
    plain = GraphOptions(normalize=False)
    looped = compute_embedding(np.array([[0, 0], [0, 1]]), labels, plain)
    np.testing.assert_allclose(looped[0], [1 / counts[0], 1 / counts[1]])
    doubled = compute_embedding(np.array([[0, 1], [1, 0], [0, 1]]), labels, plain)
    np.testing.assert_allclose(doubled[:2], [[0, 3.0], [3 / 2, 0]])


def test_many_classes_take_wider_codes():
    """Codes travel to the edge tasks as int8 below 128 classes, int16 above."""
    edges, weights, labels = small_graph(seed=3, n=600, s=3000, K=200)
    labels[:200] = np.arange(200)
    Z = embed(edges, weights, labels, GraphOptions(), edge_chunks=700, node_chunks=128)
    expected = graphemd_loop(edges, weights, labels, GraphOptions())
    np.testing.assert_allclose(Z.compute(), expected, rtol=0, atol=1e-10)
