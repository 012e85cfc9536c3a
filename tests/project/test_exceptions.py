"""The library's errors and warnings: one hierarchy, raised where documented, filterable."""

import ast
import builtins
import warnings
from pathlib import Path

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
        builtin_bases = (ValueError, TypeError, OSError, MemoryError, ConnectionError, ImportError)
        assert cls is exc.ScalencError or issubclass(cls, builtin_bases)


#: Built-in errors scalenc may raise as they are: a module's missing attribute (Python's
#: protocol), an abstract method, a system call's errno (caught by its caller), and a line
#: that cannot run.
PLAIN_RAISES = {"AttributeError", "NotImplementedError", "OSError", "AssertionError"}


def test_scalenc_raises_only_its_own_errors():
    """Every ``raise SomeBuiltinError(...)`` in scalenc is one of :data:`PLAIN_RAISES`: the
    rest raise a ScalencError subclass (which keeps the built-in base users catch)."""
    root = Path(__file__).resolve().parents[2] / "scalenc"
    plain = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            name = getattr(node.exc.func, "id", None)
            if isinstance(getattr(builtins, name or "", None), type) and name not in PLAIN_RAISES:
                plain.append(f"{path.relative_to(root.parent)}:{node.lineno} raises {name}")
    assert not plain, "\n".join(plain)


def test_the_command_errors_and_parameter_errors_are_scalenc_errors():
    from sklearn.utils._param_validation import InvalidParameterError

    from scalenc.base.validation import ParameterError
    from scalenc.cli.errors import BadInput, CLIError, UsageError

    for cls in (CLIError, BadInput, UsageError, ParameterError):
        assert issubclass(cls, exc.ScalencError)
    assert issubclass(ParameterError, InvalidParameterError)
    from scalenc.base.estimator import memory_budget

    model = LRClassifier()
    model.memory_limit = "lots"  # LRC has no such parameter: the rule is shared
    with pytest.raises(ParameterError, match="The 'memory_limit' parameter of LRClassifier"):
        memory_budget(model)


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
