"""nRBFN's golden outputs (issue 53): what ``NRBFNClassifier()`` chose on iris with main
3c74116's code, and that code's model file, against today's code
(``benchmarks/nrbfn_golden.py`` compares all 14 sets)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

import scalenc

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _golden():
    spec = importlib.util.spec_from_file_location("nrbfn_golden", BENCHMARKS / "nrbfn_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, json.loads((BENCHMARKS / "nrbfn_golden.json").read_text())


def test_the_defaults_choose_on_iris_what_3c74116_chose():
    golden, recorded = _golden()
    _, out, _ = golden.fit("iris-all")
    assert golden.differences(recorded["iris-all"], out) == []


def test_a_model_file_of_3c74116_loads_and_predicts_the_same():
    golden, recorded = _golden()
    X, _, _, _ = golden.load("iris-all")
    model = scalenc.load_model(BENCHMARKS / "nrbfn_golden_model")
    predictions = np.asarray(model.predict(X)).tolist()
    assert predictions == recorded["iris-all"]["predictions"]
    assert model.normalize_ is True and model.alpha_ == recorded["iris-all"]["alpha"]


def test_the_comparison_finds_a_changed_choice():
    golden, recorded = _golden()
    changed = json.loads(json.dumps(recorded["iris-all"]))
    changed["predictions"][0] += 1
    changed["basis_growth"]["width"][-1] /= 2
    assert golden.differences(recorded["iris-all"], changed) == [
        "predictions",
        "basis_growth.width",
    ]
