"""Shared block math, NumPy and SciPy only (never Dask): labels, class moments, the exact
k-NN search, chunk-invariant sampling and the small driver-side linear algebra.

Every module here works on one block (or one small matrix) at a time; the engine
(:mod:`scalenc.engine`) wires them into passes. Nothing here imports from another layer
of scalenc but :mod:`scalenc.exceptions`.
"""
