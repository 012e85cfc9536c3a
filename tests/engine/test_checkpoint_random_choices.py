"""A fit killed part-way and resumed from its checkpoint gives the uninterrupted model
(issue 37), for each estimator, under ``random_state=0`` and ``random_state=None``.

The kill is simulated in-process: a checkpoint kept after a whole fit is cut back to the
files written before a moment part-way through it (the checkpoint writes each file whole,
so a SIGKILL leaves exactly those; ``tests/engine/test_checkpoint.py`` kills real processes).
Under ``random_state=None`` the resumed fit must repeat the draws of the run that was
cut, so it is compared with that run, never with an independent fit.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs
from test_checkpoint import SAVE_ALL, assert_same_model

from scalenc import CCDR, CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier
from scalenc.base.estimator import fit_seed
from scalenc.engine.checkpoint import checkpointing

#: how each estimator is built, with its random_state and checkpoint
ESTIMATORS = {
    "encoder": lambda rs, **kw: EncoderClassifier(**kw),  # draws nothing
    # the defaults: the basis grows, its candidate centres drawn with the fit's seed
    "nrbfn": lambda rs, **kw: NRBFNClassifier(random_state=rs, **kw),
    "lrc": lambda rs, **kw: LRClassifier(**kw),  # draws nothing
    "ccdr": lambda rs, **kw: CCDR(subsample_size=150, random_state=rs, **kw),
    "ccdr-classifier": lambda rs, **kw: CCDRClassifier(subsample_size=150, random_state=rs, **kw),
}
SEEDED = ("nrbfn", "ccdr", "ccdr-classifier")
CASES = [pytest.param(name, 0, id=f"{name}-seed-0") for name in ESTIMATORS] + [
    pytest.param(name, None, id=f"{name}-seed-none") for name in SEEDED
]


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(n=600, p=5, K=3, seed=3, sep=1.0, unlabeled=0.05)
    return da.from_array(X, chunks=60), y


def _kill_part_way(checkpoint: Path) -> list[str]:
    """Cut ``checkpoint`` back to what a fit killed half-way through the files it wrote
    after drawing its seed (after its manifest if it draws none) had left: every file
    written later removed. Returns the names of the files kept."""
    files = sorted(
        (p for p in checkpoint.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime_ns
    )
    drawn = [i for i, p in enumerate(files) if p.parent.name == "decisions" and "seed" in p.name]
    start = drawn[0] + 1 if drawn else 1
    cut = start + max(1, (len(files) - start) // 2)
    assert cut < len(files), "the fit wrote too little to be cut part-way"
    for path in files[cut:]:
        path.unlink()
    return [str(p.relative_to(checkpoint)) for p in files[:cut]]


def _outputs(model, X) -> np.ndarray:
    return np.asarray(model.predict(X) if hasattr(model, "predict") else model.transform(X))


@pytest.mark.parametrize(("name", "random_state"), CASES)
# a drawn seed may give a subsample whose k-NN graph has two components, which CCDR warns
# of; what this test checks is the resume, not the graph
@pytest.mark.filterwarnings("ignore::scalenc.exceptions.GraphWarning")
def test_a_fit_killed_part_way_resumes_to_the_uninterrupted_model(
    name, random_state, data, tmp_path
):
    make = ESTIMATORS[name]
    X, y = data
    ck = tmp_path / "ck"
    with dask.config.set({**SAVE_ALL, "scalenc.checkpoint.keep": True}):
        first = make(random_state, checkpoint=str(ck)).fit(X, y)
    kept = _kill_part_way(ck)
    if random_state is None:
        # the seed was drawn before the kill: the resumed fit must draw with it again
        assert any(name.startswith("decisions/") and "seed" in name for name in kept), kept
    resumed = make(random_state, checkpoint=str(ck)).fit(X, y)
    summary = resumed.checkpoint_summary_
    assert summary["resumed"] and summary["passes_computed"] >= 1
    assert summary["passes_reused"] + summary["blocks_reused"] >= 1
    assert_same_model(first, resumed)
    np.testing.assert_array_equal(_outputs(first, X), _outputs(resumed, X))
    if random_state is not None:  # a fixed seed: also the fit without any checkpoint
        assert_same_model(make(random_state).fit(X, y), resumed)


def test_fit_seed_is_one_rule_remembered_for_int_seeds_and_none(tmp_path):
    drawn_from_7 = int(np.random.RandomState(7).randint(2**31 - 1))
    assert fit_seed(SimpleNamespace(random_state=7), "s") == 7
    assert fit_seed(SimpleNamespace(random_state=np.int64(7)), "s") == 7
    assert fit_seed(SimpleNamespace(random_state=7), "s", draw_from_int=True) == drawn_from_7
    for state in (None, 7):
        folder, key = str(tmp_path / f"ck-{state}"), {"fit": repr(state)}
        with checkpointing(folder, key, settings={"keep": True}):
            first = fit_seed(SimpleNamespace(random_state=state), "my-seed")
        with checkpointing(folder, key, settings={"keep": True}):  # the resumed fit
            # another state on resume would draw another seed: the first run's is read back
            again = fit_seed(SimpleNamespace(random_state=np.random.RandomState(1)), "my-seed")
        assert (tmp_path / f"ck-{state}" / "decisions" / "my-seed").is_file()
        assert again == first and 0 <= first < 2**31 - 1
        assert state is None or first == state
