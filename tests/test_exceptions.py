"""The library's errors and warnings: one hierarchy, raised where documented, filterable."""

import warnings

import numpy as np
import pandas as pd
import pytest

from scalenc import CCDR, EncoderClassifier, LRClassifier, load
from scalenc import exceptions as exc
from scalenc.cli.jobs import JobError
from scalenc.engine.cluster import ClusterUnavailableError
from scalenc.io.atomic import IncompleteOutputError
from scalenc.io.integrity import DamagedDataError, MissingChunksWarning
from scalenc.persist import ModelFileError


def test_old_import_paths_are_the_same_classes():
    assert DamagedDataError is exc.DamagedDataError
    assert MissingChunksWarning is exc.MissingChunksWarning
    assert IncompleteOutputError is exc.IncompleteOutputError
    assert ClusterUnavailableError is exc.ClusterUnavailableError
    assert JobError is exc.JobError
    assert ModelFileError is exc.ModelFileError


@pytest.mark.parametrize("name", exc.__all__)
def test_every_class_is_in_its_family(name):
    cls = getattr(exc, name)
    if issubclass(cls, Warning):
        assert issubclass(cls, exc.ScalencWarning) and issubclass(cls, UserWarning)
    else:
        assert issubclass(cls, exc.ScalencError)
        assert cls is exc.ScalencError or issubclass(cls, (ValueError, ConnectionError))


def test_a_label_like_column_is_a_data_warning(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"a": np.arange(4.0), "label": [0, 1, 0, 1]}).to_csv(path, index=False)
    with pytest.warns(exc.DataWarning, match="column 'label' is read as a feature"):
        load(path)
    with warnings.catch_warnings():  # the family filter silences it, nothing else needed
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=exc.DataWarning)
        load(path)


def test_degenerate_lda_is_a_numerical_warning():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    with pytest.warns(exc.NumericalWarning, match="within-class scatter is zero"):
        EncoderClassifier().fit(X, [0, 0, 1, 1])


def test_singular_regression_is_a_numerical_warning():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    with pytest.warns(exc.NumericalWarning, match="alpha=0.0"):
        LRClassifier(alpha=0.0).fit(np.hstack([X, X]), rng.integers(0, 2, 60))


def test_disconnected_ccdr_graph_is_a_graph_warning():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.standard_normal((30, 2)), 100.0 + rng.standard_normal((30, 2))])
    y = np.repeat([0, 1], 30)
    with pytest.warns(exc.GraphWarning, match="connected components"):
        CCDR(n_components=2, n_neighbors=3).fit(X, y)
