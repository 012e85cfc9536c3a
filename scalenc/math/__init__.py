"""Shared block math, never Dask: labels, class moments, the exact k-NN search,
chunk-invariant sampling and the small driver-side linear algebra.

Every module here works on one block (or one small matrix) at a time, with NumPy and
SciPy, or with the array API standard's calls on a device block (:mod:`scalenc.math.xp`:
its namespace, the device idioms as named helpers, the choice between a step's host and
device implementations); the engine
(:mod:`scalenc.engine`) wires them into passes. Nothing here imports from another layer
of scalenc but :mod:`scalenc.exceptions`.
"""
