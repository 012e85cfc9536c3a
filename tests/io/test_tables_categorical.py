"""Tables with string, categorical and boolean columns, and missing values: encoded inside
scalenc, checked against scikit-learn's OneHotEncoder / OrdinalEncoder / SimpleImputer
followed by the same estimator on the encoded array."""

from __future__ import annotations

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder
from test_cli import run

from scalenc import (
    CCDR,
    CCDRClassifier,
    EncoderClassifier,
    LRClassifier,
    NRBFNClassifier,
    Table,
    load,
    load_model,
    save_model,
)
from scalenc.exceptions import InputError
from scalenc.io.tables import MAX_CATEGORIES, frame_statistics, merge_statistics

NUMERIC = ["height", "weight"]
CATEGORICAL = ["colour", "size", "member"]
SIZES = ["S", "M", "L", "XL"]  # the category dtype's order, XL never occurs


def make_table(n=600, seed=0):
    """Numeric, string, pandas-category and boolean feature columns, and labels that
    depend on all of them."""
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue"], size=n)
    size = rng.choice(SIZES[:3], size=n)
    member = rng.random(n) < 0.4
    height = rng.normal(170, 10, n)
    weight = rng.normal(70, 8, n)
    score = (height - 170) / 10 + (colour == "red") * 1.5 - (size == "S") + member
    y = np.digitize(score + rng.normal(0, 0.5, n), [-0.5, 0.8])
    frame = pd.DataFrame(
        {
            "height": height,
            "colour": colour,
            "size": pd.Categorical(size, categories=SIZES),
            "weight": weight,
            "member": member,
        }
    )
    return frame, y


def sklearn_encoder(**onehot):
    """scikit-learn's encoding of :func:`make_table`'s columns, laid out as scalenc's."""
    categories = [["blue", "green", "red"], SIZES, [False, True]]
    return ColumnTransformer(
        [
            ("num", "passthrough", NUMERIC),
            (
                "cat",
                OneHotEncoder(categories=categories, sparse_output=False, **onehot),
                CATEGORICAL,
            ),
        ]
    )


def onehot_with(sizes):
    """:func:`sklearn_encoder` with other categories for the size column."""
    onehot = OneHotEncoder(
        categories=[["blue", "green", "red"], sizes, [False, True]], sparse_output=False
    )
    return ColumnTransformer([("num", "passthrough", NUMERIC), ("cat", onehot, CATEGORICAL)])


def outputs(model, X):
    """The model's probabilities (classifiers) or embedding (CCDR), in memory."""
    out = model.predict_proba(X) if hasattr(model, "predict_proba") else model.transform(X)
    return np.asarray(out.compute() if isinstance(out, da.Array) else out)


ESTIMATORS = [
    pytest.param(lambda: LRClassifier(), id="lrc"),
    pytest.param(lambda: EncoderClassifier(kernels=("linear", "euclidean")), id="encoder"),
    pytest.param(lambda: NRBFNClassifier(n_neighbors=8, random_state=0), id="nrbfn"),
    pytest.param(lambda: CCDR(n_components=2, subsample_size=200, random_state=0), id="ccdr"),
    pytest.param(
        lambda: CCDRClassifier(n_components=2, subsample_size=200, random_state=0), id="ccdr-clf"
    ),
]


@pytest.mark.parametrize("make", ESTIMATORS)
def test_pandas_table_equals_onehot_then_estimator(make):
    frame, y = make_table()
    encoded = sklearn_encoder().fit_transform(frame)
    model = make().fit(frame, y)
    oracle = make().fit(encoded, y)
    assert model.n_features_in_ == 5
    assert model.feature_names_in_.tolist() == list(frame.columns)
    assert model.feature_encoder_.n_output == encoded.shape[1] == 2 + 3 + 4 + 2
    np.testing.assert_allclose(
        outputs(model, frame), outputs(oracle, encoded), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize("make", ESTIMATORS[:2])
def test_dask_table_is_lazy_and_equals_pandas(make):
    frame, y = make_table()
    ddf = dd.from_pandas(frame, npartitions=4)
    labels = dd.from_pandas(pd.Series(y), npartitions=4)
    model = make().fit(ddf, labels)
    in_memory = make().fit(frame, y)
    got, want = model.feature_encoder_, in_memory.feature_encoder_
    assert got.feature_names_out == want.feature_names_out  # same categories, same order
    out = model.predict_proba(ddf)
    assert isinstance(out, da.Array)  # lazy, like the input
    # other row blocks sum in another order; the one-hot blocks' collinear columns make the
    # encoder's embedding statistics amplify that rounding to about 1e-6
    np.testing.assert_allclose(out.compute(), outputs(in_memory, frame), rtol=1e-5, atol=1e-9)
    assert model.score(ddf, labels) == pytest.approx(in_memory.score(frame, y))


def test_categories_pass_merges_like_one_block():
    frame, _ = make_table(n=500)
    whole = frame_statistics(frame, NUMERIC, CATEGORICAL)
    parts = [
        frame_statistics(frame.iloc[a : a + 70], NUMERIC, CATEGORICAL) for a in range(0, 500, 70)
    ]
    merged = merge_statistics(*parts)
    assert merged["rows"] == 500
    np.testing.assert_allclose(merged["sum"], whole["sum"])
    for got, want in zip(merged["values"], whole["values"]):
        assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}


def test_parquet_and_csv_files_encode_lazily(tmp_path):
    frame, y = make_table()
    table = frame.assign(label=y)
    table.to_parquet(tmp_path / "t.parquet", row_group_size=150)
    table.to_csv(tmp_path / "t.csv", index=False)
    X, yd = load(tmp_path / "t.parquet", label_column="label")
    assert isinstance(X, Table)
    assert X.shape == (600, 5) and X.chunks[0] == (150,) * 4 and yd.chunks[0] == (150,) * 4
    model = LRClassifier().fit(X, yd)
    pred = model.predict(X)
    assert isinstance(pred, da.Array) and pred.chunks[0] == (150,) * 4
    # the file's metadata holds the category column's dictionary, unseen "XL" included
    # (pyarrow gives it sorted)
    assert model.feature_encoder_.categories[1].tolist() == ["L", "M", "S", "XL"]
    oracle = LRClassifier().fit(onehot_with(["L", "M", "S", "XL"]).fit_transform(frame), y)
    np.testing.assert_allclose(model.coef_, oracle.coef_, rtol=1e-10)
    Xc, yc = load(tmp_path / "t.csv", label_column="label")
    csv_model = LRClassifier().fit(Xc, yc)
    # a CSV holds strings: the categories are the values seen, sorted (no "XL")
    assert csv_model.feature_encoder_.categories[1].tolist() == ["L", "M", "S"]
    csv_oracle = LRClassifier().fit(onehot_with(["L", "M", "S"]).fit_transform(frame), y)
    np.testing.assert_allclose(csv_model.coef_, csv_oracle.coef_, rtol=1e-10)


def test_model_file_keeps_the_encoder(tmp_path):
    frame, y = make_table()
    model = NRBFNClassifier(n_neighbors=8, random_state=0).fit(frame, y)
    back = load_model(save_model(model, tmp_path / "model"))
    assert back.feature_encoder_.categories[0].tolist() == ["blue", "green", "red"]
    np.testing.assert_array_equal(back.predict_proba(frame), model.predict_proba(frame))


def test_unknown_categories_error_by_default_or_ignored():
    frame, y = make_table()
    new = frame.head(20).copy()
    new["colour"] = new["colour"].astype(object)
    new.loc[new.index[:3], "colour"] = "purple"
    model = LRClassifier().fit(frame, y)
    with pytest.raises(
        InputError, match=r"column 'colour' holds 3 value\(s\) the fit never saw: \['purple'\]"
    ):
        model.predict(new)
    ignoring = LRClassifier(handle_unknown="ignore").fit(frame, y)
    ct = sklearn_encoder(handle_unknown="ignore").fit(frame)
    oracle = LRClassifier().fit(ct.transform(frame), y)
    np.testing.assert_allclose(
        ignoring.predict_proba(new), oracle.predict_proba(ct.transform(new)), rtol=1e-10
    )


def test_missing_values_refused_naming_the_columns():
    frame, y = make_table()
    frame.loc[3, "weight"] = np.nan
    frame.loc[[4, 5], "colour"] = None
    with pytest.raises(InputError, match=r"missing values: 'weight' \(1\), 'colour' \(2\)"):
        EncoderClassifier().fit(frame, y)
    ddf = dd.from_pandas(frame, npartitions=3)
    with pytest.raises(InputError, match=r"handle_missing='impute'"):
        LRClassifier().fit(ddf, dd.from_pandas(pd.Series(y), npartitions=3))


@pytest.mark.parametrize("make", ESTIMATORS[:3])
def test_missing_values_imputed_as_simple_imputer(make):
    frame, y = make_table()
    frame.loc[[3, 9], "weight"] = np.nan
    frame["colour"] = frame["colour"].astype(object)
    frame.loc[[4, 5, 6], "colour"] = np.nan
    frame.loc[7, "size"] = np.nan
    imputing = ColumnTransformer(
        [
            ("num", SimpleImputer(strategy="mean"), NUMERIC),
            (
                "cat",
                make_pipeline(
                    SimpleImputer(strategy="most_frequent"),
                    OneHotEncoder(
                        categories=[["blue", "green", "red"], SIZES, [False, True]],
                        sparse_output=False,
                    ),
                ),
                CATEGORICAL,
            ),
        ]
    )
    encoded = imputing.fit_transform(frame.astype({"size": object}))
    model = make().set_params(handle_missing="impute").fit(frame, y)
    oracle = make().fit(encoded, y)
    np.testing.assert_allclose(
        outputs(model, frame), outputs(oracle, encoded), rtol=1e-10, atol=1e-12
    )


def test_numeric_array_imputed_in_one_more_pass():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 4))
    y = (X[:, 0] > 0).astype(int)
    X[rng.random(X.shape) < 0.05] = np.nan
    filled = SimpleImputer(strategy="mean").fit_transform(X)
    model = LRClassifier(handle_missing="impute").fit(da.from_array(X, chunks=90), y)
    oracle = LRClassifier().fit(filled, y)
    np.testing.assert_allclose(model.coef_, oracle.coef_, rtol=1e-10)
    assert model.n_passes_ == 1  # the estimator's own pass; the imputation pass precedes it
    np.testing.assert_allclose(model.predict_proba(X), oracle.predict_proba(filled), rtol=1e-10)
    with pytest.raises(InputError, match="NaN or infinite"):
        LRClassifier().fit(X, y)


def test_ordinal_encoding_equals_ordinal_encoder():
    frame, y = make_table()
    ct = ColumnTransformer(
        [
            ("num", "passthrough", NUMERIC),
            (
                "cat",
                OrdinalEncoder(categories=[["blue", "green", "red"], SIZES, [False, True]]),
                CATEGORICAL,
            ),
        ]
    )
    model = LRClassifier(categorical="ordinal").fit(frame, y)
    oracle = LRClassifier().fit(ct.fit_transform(frame), y)
    np.testing.assert_allclose(model.coef_, oracle.coef_, rtol=1e-10)


@pytest.mark.filterwarnings("ignore:X does not have valid feature names")
def test_refusals_name_the_columns():
    frame, y = make_table()
    with pytest.raises(
        InputError, match=r"\['colour', 'size', 'member'\] are not numeric and categorical='error'"
    ):
        LRClassifier(categorical="error").fit(frame, y)
    ids = frame.assign(customer=[f"c{i}" for i in range(len(frame))])
    big = pd.concat([ids] * (MAX_CATEGORIES // len(frame) + 1), ignore_index=True)
    big["customer"] = [f"c{i}" for i in range(len(big))]
    with pytest.raises(InputError, match=f"'customer' has more than {MAX_CATEGORIES} distinct"):
        LRClassifier().fit(big, np.resize(y, len(big)))
    dated = frame.assign(when=pd.Timestamp("2026-01-01"))
    with pytest.raises(InputError, match=r"\['when'\] hold datetime64"):
        LRClassifier().fit(dated, y)
    model = LRClassifier().fit(frame, y)
    with pytest.raises(InputError, match="fitted on a table with categorical column"):
        model.predict(np.zeros((2, 5)))


def test_numeric_frames_are_not_encoded():
    """Tables of numbers only take the array path as before (no encoder, no extra pass)."""
    frame, y = make_table()
    numbers = frame[NUMERIC]
    model = LRClassifier().fit(numbers, y)
    assert model.feature_encoder_ is None
    np.testing.assert_allclose(model.coef_, LRClassifier().fit(numbers.to_numpy(), y).coef_)


def test_command_fits_and_predicts_a_table_with_categories(tmp_path, capsys):
    """`scalenc fit` on a Parquet file with string, category and boolean columns and
    missing values: refused by default naming the columns, fitted with --handle-missing
    impute, and the model predicts the file as the API's model does."""
    frame, y = make_table()
    frame["colour"] = frame["colour"].astype(object)
    frame.loc[[4, 5], "colour"] = None
    frame.loc[3, "weight"] = np.nan
    path = tmp_path / "t.parquet"
    frame.assign(label=y).to_parquet(path, row_group_size=200)
    data = ["--data", path, "--label-column", "label"]
    code, summary, _ = run(capsys, "fit", "lrc", *data, "--model-out", tmp_path / "m")
    assert code == 2
    assert "missing values: 'weight' (1), 'colour' (2)" in summary["error"]["message"]
    assert "--handle-missing impute" in summary["error"]["message"]
    argv = [*data, "--model-out", tmp_path / "m", "--handle-missing", "impute"]
    code, summary, err = run(capsys, "fit", "lrc", *argv, "--categorical", "onehot")
    assert code == 0, err
    assert summary["params"]["handle_missing"] == "impute"
    out = tmp_path / "pred.parquet"
    code, summary, err = run(capsys, "predict", "--model", tmp_path / "m", *data, "--out", out)
    assert code == 0, err
    expected = LRClassifier(handle_missing="impute").fit(frame, y).predict(frame)
    np.testing.assert_array_equal(pd.read_parquet(out)["prediction"].to_numpy(), expected)
    code, summary, _ = run(
        capsys,
        "fit",
        "lrc",
        *argv,
        "--overwrite",
        "--set",
        "categorical=error",
        "--categorical",
        "ordinal",
    )
    assert code == 2 and "give only one of them" in summary["error"]["message"]
