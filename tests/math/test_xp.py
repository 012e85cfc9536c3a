"""The device idioms of :mod:`scalenc.math.xp` and the per-thread buffers, on NumPy and on
``array_api_strict`` arrays (the standard and nothing else, standing in for a device)."""

from __future__ import annotations

import array_api_strict
import numpy as np
import pytest

from scalenc.math import buffers
from scalenc.math.xp import (
    as_block,
    host_dtype,
    host_or_device,
    host_rows,
    index_dtype,
    matmul,
    namespace,
    rows_per_tile,
    take_rows,
    to_host,
)

X = np.arange(12.0).reshape(4, 3)


def strict(a):
    return array_api_strict.asarray(a)


def test_as_block_is_a_plain_ndarray_for_numpy_and_the_block_itself_elsewhere():
    memmapped = X.view(np.memmap)
    got = as_block(np, memmapped)
    assert type(got) is np.ndarray and np.shares_memory(got, X)
    block = strict(X)
    assert as_block(namespace(block), block) is block


@pytest.mark.parametrize("to", [lambda a: a, strict], ids=["numpy", "strict"])
def test_take_rows_and_host_rows(to):
    block = to(X)
    xp = namespace(block)
    got = take_rows(xp, block, np.array([2, 0]))
    assert namespace(got) is xp
    np.testing.assert_array_equal(to_host(got), X[[2, 0]])
    rows = host_rows(block, np.array([3, 1]), np.float32)
    assert isinstance(rows, np.ndarray) and rows.dtype == np.float32
    np.testing.assert_array_equal(rows, X[[3, 1]])


def test_take_rows_copies_numpy_and_keeps_a_device_block_taken_whole():
    every = np.arange(X.shape[0])
    assert not np.shares_memory(take_rows(np, X, every), X)
    block = strict(X)
    assert take_rows(namespace(block), block, every) is block
    reordered = take_rows(namespace(block), block, every[::-1])
    np.testing.assert_array_equal(to_host(reordered), X[::-1])


def test_index_dtype():
    assert index_dtype(np) is np.intp
    assert index_dtype(namespace(strict(X))) == array_api_strict.int64


def test_rows_per_tile_keeps_the_host_choice_and_sizes_a_device_tile():
    assert rows_per_tile(np, 37, 1000, host_elements=2**10) == 37
    xp = namespace(strict(X))
    assert rows_per_tile(xp, 37, 2**20, host_elements=2**10) == 2**25 // 2**20
    assert rows_per_tile(xp, 37, 2**30, host_elements=2**10, least=256) == 256


@pytest.mark.parametrize("to", [lambda a: a, strict], ids=["numpy", "strict"])
def test_matmul_into_out(to):
    A, B = to(X), to(X.T.copy())
    xp = namespace(A)
    want = X @ X.T
    np.testing.assert_array_equal(to_host(matmul(xp, A, B)), want)
    out = xp.zeros((4, 4), dtype=xp.float64)
    assert matmul(xp, A, B, out=out) is out
    np.testing.assert_array_equal(to_host(out), want)


def test_host_scratch_is_a_reused_numpy_buffer_and_none_on_a_device():
    a = buffers.host_scratch(np, "test_xp.a", (3, 2), np.float32)
    assert a.shape == (3, 2) and a.dtype == np.float32
    b = buffers.host_scratch(np, "test_xp.a", (2, 2), np.float32)
    assert np.shares_memory(a, b)
    assert buffers.host_scratch(namespace(strict(X)), "test_xp.a", (3, 2), np.float32) is None


@pytest.mark.parametrize("to", [lambda a: a, strict], ids=["numpy", "strict"])
@pytest.mark.parametrize("dtype", [None, np.float32])
def test_gather_rows_in_a_dtype(to, dtype):
    block = to(X)
    xp = namespace(block)
    want_dtype = None if dtype is None else (np.dtype(dtype) if xp is np else xp.float32)
    at = np.array([3, 3, 1])
    got = buffers.gather("test_xp.gather", block, at if xp is np else strict(at), want_dtype)
    np.testing.assert_array_equal(to_host(got), X[at])
    if dtype is not None:
        assert got.dtype == want_dtype


@pytest.mark.parametrize("to", [lambda a: a, strict], ids=["numpy", "strict"])
def test_scratch_astype(to):
    block = to(X)
    assert buffers.scratch_astype("test_xp.astype", block, np.float64) is block
    got = buffers.scratch_astype("test_xp.astype", to(X.astype(np.float32)), np.float64)
    np.testing.assert_array_equal(to_host(got), X)
    assert host_dtype(got.dtype) == np.float64


def test_host_or_device_chooses_by_the_namespace():
    def host(a):
        return "host"

    def device(a):
        return "device"

    assert host_or_device(np, host, device) is host
    assert host_or_device(namespace(strict(X)), host, device) is device
