"""The errors and warnings scalenc raises, in one place, so they can be caught or filtered.

Every error scalenc raises is a :class:`ScalencError` and also a subclass of the built-in
error a caller would catch anyway: :class:`InputError` (``ValueError``) for data or
arguments that cannot be used as given, :class:`InputTypeError` (``TypeError``),
:class:`InputNotFoundError` (``FileNotFoundError``), :class:`InputPermissionError`
(``PermissionError``), :class:`OutputExistsError` (``FileExistsError``),
:class:`MemoryBudgetError` (``MemoryError``) for a stage that would not fit the memory a
fit may use, :class:`ClusterUnavailableError` (``ConnectionError``)
for a lost cluster, and the file errors below. A bad parameter raises
:class:`scalenc.base.validation.ParameterError`, a ``ScalencError`` that is also
scikit-learn's ``InvalidParameterError``; the command's own errors
(:mod:`scalenc.cli.errors`) are ``ScalencError`` too, each with its exit code.
Every warning is a :class:`ScalencWarning` (a ``UserWarning``), in three families:

* :class:`DataWarning` — something about the input data the user should look at
  (:class:`MissingChunksWarning`, a label-like column read as a feature, graph nodes with
  no labeled neighbour: :class:`NoLabeledNeighbourWarning`);
* :class:`ApproximationWarning` — the result differs from the paper's exact algorithm
  (:class:`BasisCappedWarning`);
* :class:`NumericalWarning` — a degenerate or ill-conditioned problem was solved by a
  documented fallback (:class:`GraphWarning` for CCDR's neighbourhood graph,
  :class:`ConvergenceWarning`).

Examples
--------
Turn every scalenc data warning into an error, leave the others as they are:

>>> import warnings
>>> from scalenc.exceptions import DataWarning
>>> warnings.simplefilter("error", DataWarning)
>>> warnings.resetwarnings()

Silence the fallbacks of degenerate problems in a batch job:

>>> from scalenc.exceptions import NumericalWarning
>>> warnings.filterwarnings("ignore", category=NumericalWarning)
>>> warnings.resetwarnings()
"""

from __future__ import annotations

__all__ = [
    "ScalencError",
    "InputError",
    "InputTypeError",
    "InputNotFoundError",
    "InputPermissionError",
    "OutputExistsError",
    "MemoryBudgetError",
    "DamagedDataError",
    "IncompleteOutputError",
    "ModelFileError",
    "JobError",
    "ClusterUnavailableError",
    "WorkersKilledError",
    "CheckpointMismatchError",
    "MissingPlotDependency",
    "MissingDeviceDependency",
    "ScalencWarning",
    "DataWarning",
    "MissingChunksWarning",
    "NoLabeledNeighbourWarning",
    "ApproximationWarning",
    "BasisCappedWarning",
    "NumericalWarning",
    "GraphWarning",
    "ConvergenceWarning",
    "CheckpointWarning",
]


# --- errors -----------------------------------------------------------------------------


class ScalencError(Exception):
    """Base class of the errors scalenc raises itself (parameter errors are scikit-learn's
    ``InvalidParameterError``, a ``ValueError``).

    Examples
    --------
    Catch every scalenc error in one place; the message says what to do:

    >>> from scalenc import load_model
    >>> from scalenc.exceptions import ModelFileError, ScalencError
    >>> try:
    ...     load_model("no-such-model")
    ... except ScalencError as error:
    ...     print(type(error).__name__)
    ModelFileError

    Each is also the built-in error a caller would catch anyway:

    >>> issubclass(ModelFileError, ValueError)
    True
    """


class InputError(ScalencError, ValueError):
    """The data or an argument cannot be used as given; the message says what is wrong (the
    shape, the chunks, the value) and how to fix it."""


class InputTypeError(ScalencError, TypeError):
    """An argument of the wrong type; the message names the types accepted."""


class InputNotFoundError(ScalencError, FileNotFoundError):
    """An input path or URL that does not exist."""


class InputPermissionError(ScalencError, PermissionError):
    """An input this process may not read."""


class OutputExistsError(ScalencError, FileExistsError):
    """An output that exists already and may not be replaced (pass ``overwrite=True``)."""


class MemoryBudgetError(ScalencError, MemoryError):
    """A stage would need more memory than the fit may use; the message gives the sizes
    and the settings (``memory_limit``, a smaller basis or subsample) that fit."""


class DamagedDataError(ScalencError, ValueError):
    """The input store is damaged: chunks missing or undecodable, metadata unreadable."""


class IncompleteOutputError(ScalencError, ValueError):
    """An output prefix on an object store whose publishing was interrupted."""


class ModelFileError(ScalencError, ValueError):
    """A model directory that cannot be written or read: the message says why."""


class JobError(ScalencError, ValueError):
    """A job file that cannot be run as written."""


class MissingPlotDependency(ScalencError, ImportError):
    """matplotlib, needed for plots, is not installed.

    An ``ImportError``, so that code which already catches a missing optional dependency
    catches it too.

    Examples
    --------
    >>> from scalenc.report import MissingPlotDependency, require_matplotlib
    >>> try:
    ...     Figure, FigureCanvas = require_matplotlib()
    ... except MissingPlotDependency as error:  # the message says what to install
    ...     print(error)
    >>> issubclass(MissingPlotDependency, ImportError)
    True
    """


class MissingDeviceDependency(ScalencError, ImportError):
    """A GPU was asked for (``load(..., device="gpu")``) but CuPy cannot run here: it is
    not installed, or no CUDA device is visible. The message says what to install.

    Examples
    --------
    >>> from scalenc.exceptions import MissingDeviceDependency
    >>> issubclass(MissingDeviceDependency, ImportError)
    True
    """


class ClusterUnavailableError(ScalencError, ConnectionError):
    """The Dask scheduler cannot be reached, refuses us, or was lost mid-computation.

    The ``scalenc`` command maps it to exit code 3 ("cluster unreachable").
    """


class WorkersKilledError(ClusterUnavailableError):
    """Dask gave up on a task of a fit because the workers running it kept dying
    (``distributed``'s ``KilledWorker``, its ``__cause__``): a fit without a checkpoint, or
    one whose resumes stopped making progress. The message says what kept the work (a
    checkpoint) and the settings that decide it (:mod:`scalenc.engine.resume`)."""


class CheckpointMismatchError(ScalencError, ValueError):
    """A fit's checkpoint was written by another fit (other data, parameters or scalenc
    version), so it is not resumed; the message says what changed and how to start
    afresh."""


# --- warnings ---------------------------------------------------------------------------


class ScalencWarning(UserWarning):
    """Base class of every warning scalenc issues.

    Examples
    --------
    Record scalenc's warnings of a fit and look at them afterwards:

    >>> import warnings
    >>> import numpy as np
    >>> from scalenc import LRClassifier
    >>> from scalenc.exceptions import NumericalWarning, ScalencWarning
    >>> X = np.repeat([[0.0, 1.0], [1.0, 0.0]], 5, axis=0)  # two features, one direction
    >>> y = np.repeat([0, 1], 5)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always", ScalencWarning)
    ...     model = LRClassifier(alpha=0.0).fit(X, y)
    >>> [issubclass(w.category, NumericalWarning) for w in caught]
    [True]
    """


class DataWarning(ScalencWarning):
    """The input data has something the user should look at; the computation went on."""


class MissingChunksWarning(DataWarning):
    """A Zarr array has chunks absent from its store, read as the fill value by request."""


class NoLabeledNeighbourWarning(DataWarning):
    """Nodes of a graph have no labeled neighbour: the encoder's graph embedding of them is
    zero, so its outputs for them are the class priors (the most frequent class)."""


class ApproximationWarning(ScalencWarning):
    """The fit differs from the paper's exact algorithm (a cap, a sample), as configured."""


class BasisCappedWarning(ApproximationWarning):
    """nRBFN's soft-KNN basis was capped or sampled below what the paper's rule asks for."""


class NumericalWarning(ScalencWarning, RuntimeWarning):
    """A degenerate or ill-conditioned problem was solved by a documented fallback."""


class GraphWarning(NumericalWarning):
    """CCDR's neighbourhood graph is disconnected, has isolated rows or a tied spectrum."""


class ConvergenceWarning(NumericalWarning):
    """An iterative solver did not converge and a fallback was used."""


class CheckpointWarning(ScalencWarning):
    """A checkpoint file was damaged or unreadable and its work was computed again, or a
    pass could not be checkpointed; the fit's result is unaffected."""
