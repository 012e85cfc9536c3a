"""The encoder paper's simulations: reproducible for any chunking, the stated distributions."""

import numpy as np
import pytest

from scalenc.simulate import SETTINGS, simulate, simulate_rows


@pytest.mark.parametrize("setting", SETTINGS)
def test_same_data_for_any_chunking(setting):
    a, ya = simulate(setting, 2500, 12, 4, random_state=7, chunk_rows=333)
    b, yb = simulate(setting, 2500, 12, 4, random_state=7, chunk_rows=2048)
    np.testing.assert_array_equal(a.compute(), b.compute())
    np.testing.assert_array_equal(ya.compute(), yb.compute())
    X, y = simulate_rows(setting, 1000, 1100, 12, 4, 7, dtype=np.float32)
    np.testing.assert_array_equal(a[1000:1100].compute(), X)


def test_distributions_follow_the_paper():
    X, y = simulate_rows("uniform", 0, 4000, 20, 5, 0)
    rows = np.arange(4000)
    assert X[rows, y].min() >= 1 and X[rows, y].max() <= 3
    off = X.copy()
    off[rows, y] = np.nan
    assert np.nanmin(off) >= 0 and np.nanmax(off) <= 1
    Xn, yn = simulate_rows("normal", 0, 4000, 20, 5, 0)
    signal = Xn[rows, yn]
    Xn[rows, yn] = np.nan
    assert abs(signal.mean() - 8) < 0.1 and abs(np.nanmean(Xn) - 1) < 0.05
    Xt, _ = simulate_rows("normal_transformed", 0, 50, 20, 5, 0)
    assert Xt.shape == (50, 20)
    np.testing.assert_array_equal(np.bincount(y, minlength=5) > 700, True)


def test_unknown_setting():
    with pytest.raises(ValueError, match=r"Unknown simulation 'gauss'; choose one of"):
        simulate("gauss", 10)
