"""The execution layer: passes as tree reductions over row blocks, the cluster, memory.

* :mod:`~scalenc.engine.reduce` — :func:`~scalenc.engine.reduce.reduce_rows` (the one graph
  builder of every pass), :func:`~scalenc.engine.reduce.map_rows`, the row cache.
* :mod:`~scalenc.engine.passes` — the passes every method shares (classes, class moments,
  label counts, stratified samples, k-NN, row gathers).
* :mod:`~scalenc.engine.cluster` — ``compute`` with BLAS pinned, lost-scheduler and
  no-worker errors; :mod:`~scalenc.engine.connect` — :func:`~scalenc.engine.connect.connect`.
* :mod:`~scalenc.engine.memory` — the memory a fit may use.
"""
