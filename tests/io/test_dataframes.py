"""pandas and Dask DataFrames in every fit/predict/transform (issue 11): lazy, named, checked.

A Dask DataFrame stays lazy (Dask in gives Dask out; ``predict`` computes nothing), nothing
frame-sized is brought to the client, the model equals the one fitted on the same NumPy
data, and column names become ``feature_names_in_``, checked at predict (a renamed or
reordered column is an error, not a silent mismatch).
"""

import threading

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.callbacks import Callback
from dask.core import get_dependencies

from scalenc import CCDR, CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier

ESTIMATORS = {
    "encoder": lambda: EncoderClassifier(kernels=("linear", "euclidean")),
    "lrc": LRClassifier,
    "nrbfn": lambda: NRBFNClassifier(n_neighbors=5, n_candidates=300, random_state=0),
    "ccdr-classifier": lambda: CCDRClassifier(n_components=2, subsample_size=500, random_state=0),
}


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 2000)
    X = rng.normal(size=(2000, 4)) + y[:, None]
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    return (
        df,
        pd.Series(y, name="y"),
        dd.from_pandas(df, npartitions=4),
        dd.from_pandas(pd.Series(y, name="y"), npartitions=4),
    )


class SinkSizes(Callback):
    """Per compute, the largest result handed back to the client (the graph's sinks)."""

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()
        self.computes, self.largest = 0, 0
        self._sinks = set()

    def _start(self, dsk):
        needed = {d for key in dsk for d in get_dependencies(dsk, key)}
        self._sinks = set(dsk) - needed
        self.computes += 1

    def _posttask(self, key, result, dsk, state, worker_id):
        if key in self._sinks:
            with self._lock:
                self.largest = max(self.largest, int(np.size(result)) if np.ndim(result) else 1)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_dask_dataframe_fit_equals_numpy_and_predict_is_lazy(frames, name):
    df, y, ddf, dy = frames
    with dask.config.set(scheduler="threads"), SinkSizes() as sizes:
        model = ESTIMATORS[name]().fit(ddf, dy)
    assert sizes.largest < df.shape[0]  # nothing n-sized reached the client
    assert list(model.feature_names_in_) == ["a", "b", "c", "d"]
    reference = ESTIMATORS[name]().fit(df.to_numpy(), y.to_numpy())
    with SinkSizes() as calls:
        lazy = model.predict(ddf)
    assert calls.computes == 0 and isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), reference.predict(df.to_numpy()))
    assert model.score(ddf, dy) == pytest.approx(reference.score(df.to_numpy(), y.to_numpy()))


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_reordered_columns_are_taken_by_name_and_renamed_ones_refused(frames, name):
    df, y, _, _ = frames
    model = ESTIMATORS[name]().fit(df, y)
    assert list(model.feature_names_in_) == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(model.predict(df[["b", "a", "c", "d"]]), model.predict(df))
    with pytest.raises(ValueError, match=r"X has no column\(s\) \['d'\]"):
        model.predict(df.rename(columns={"d": "e"}))
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        model.predict(df.to_numpy())


def test_transformers_keep_names_and_lazy_output(frames):
    df, y, ddf, dy = frames
    ccdr = CCDR(n_components=2, subsample_size=500, random_state=0).fit(ddf, dy)
    assert list(ccdr.feature_names_in_) == ["a", "b", "c", "d"]
    with SinkSizes() as calls:
        Z = ccdr.transform(ddf)
    assert calls.computes == 0 and Z.compute().shape == (2000, 2)
    encoder = EncoderClassifier().fit(ddf, dy)
    np.testing.assert_allclose(
        encoder.transform(ddf).compute(), EncoderClassifier().fit(df, y).transform(df)
    )


def test_non_numeric_dataframe_columns_are_encoded_or_named(frames):
    df, y, _, _ = frames
    bad = df.assign(city="x")
    message = r"feature column\(s\) \['city'\] are not numeric and categorical='error'"
    with pytest.raises(ValueError, match=message):
        EncoderClassifier(categorical="error").fit(bad, y)
    with pytest.raises(ValueError, match=message):
        EncoderClassifier(categorical="error").fit(dd.from_pandas(bad, npartitions=2), y)
    model = EncoderClassifier().fit(dd.from_pandas(bad, npartitions=2), y)  # one-hot
    assert model.feature_encoder_.feature_names_out[-1] == "city=x"


def test_row_aligned_outputs_of_a_dask_dataframe(frames):
    """Outputs that need row counts (CCDR's labelled transform, the encoder's full method)
    count the partitions on the workers and give the NumPy results."""
    df, y, ddf, dy = frames
    ccdr = CCDR(n_components=2, subsample_size=500, random_state=0).fit(df, y)
    np.testing.assert_allclose(
        ccdr.transform(ddf, dy).compute(), ccdr.transform(df, y), rtol=1e-10, atol=1e-12
    )
    full = EncoderClassifier(method="full").fit(df.iloc[:400], y.iloc[:400])
    np.testing.assert_array_equal(
        full.predict(dd.from_pandas(df.iloc[:400], npartitions=3)).compute(),
        full.predict(df.iloc[:400]),
    )


@pytest.mark.parametrize(
    "make, names",
    [
        (lambda: CCDR(n_components=2, subsample_size=500, random_state=0), ["ccdr0", "ccdr1"]),
        (EncoderClassifier, ["encoderclassifier0", "encoderclassifier1", "encoderclassifier2"]),
    ],
    ids=["ccdr", "encoder"],
)
def test_get_feature_names_out_and_pandas_output(frames, make, names):
    df, y, _, _ = frames
    model = make().fit(df, y)
    assert list(model.get_feature_names_out()) == names
    out = model.set_output(transform="pandas").transform(df)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == names
    assert out.shape == (len(df), len(names))
