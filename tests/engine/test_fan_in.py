"""The reductions' fan-in comes from one configuration, read where a reduction is built."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from scalenc import CCDR, EncoderClassifier
from scalenc.engine import reduce
from scalenc.engine.reduce import SPLIT_EVERY, fan_in


def test_fan_in_reads_the_configuration():
    assert fan_in() == SPLIT_EVERY == 8
    with dask.config.set({"scalenc.split-every": 3}):
        assert fan_in() == 3
        assert fan_in(5) == 5  # an explicit value overrides it
    for bad in (1, 2.5, "4", True):
        with pytest.raises(ValueError, match="split_every must be at least 2, an integer"):
            fan_in(bad)


def _merge_sizes(fan_ins: list):
    def combine(*parts):
        fan_ins.append(len(parts))
        return sum(parts)

    return combine


def _block_sum(X, *, row_start):
    return float(X.sum())


def test_a_reduction_takes_the_configured_fan_in():
    X = da.ones((100, 2), chunks=(10, 2))  # 10 blocks
    for setting, expected in ((None, [8, 2, 2]), (3, [3, 3, 3, 3, 2]), (4, [4, 4, 2, 3])):
        fan_ins: list = []
        with dask.config.set({"scalenc.split-every": setting}):
            graph = reduce.reduce_rows(_block_sum, X, combine=_merge_sizes(fan_ins))
        (total,) = dask.compute(graph, scheduler="sync")
        assert total == 200.0
        assert sorted(fan_ins) == sorted(expected)


@pytest.mark.parametrize(
    "make", [lambda s: EncoderClassifier(split_every=s), lambda s: CCDR(split_every=s)]
)
def test_an_estimator_split_every_is_its_fits_setting(monkeypatch, make):
    """An estimator's ``split_every`` is the fan-in of every reduction its fit builds;
    None leaves Dask's configuration in force."""
    seen = []
    monkeypatch.setattr(reduce, "fan_in", lambda s=None: seen.append(fan_in(s)) or fan_in(s))
    rng = np.random.default_rng(0)
    X = da.from_array(rng.normal(size=(120, 3)), chunks=(20, 3))
    y = da.from_array(np.repeat([0, 1, 2], 40), chunks=20)
    make(3).fit(X, y)
    assert seen and set(seen) == {3}
    seen.clear()
    with dask.config.set({"scalenc.split-every": 5}):
        make(None).fit(X, y)
    assert seen and set(seen) == {5}
