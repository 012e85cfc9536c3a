"""The `scalenc` command: in-process through `main(argv)`, and the real executable by subprocess."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import pytest
from conftest import make_blobs

from scalenc import CCDR, CCDRClassifier, LRClassifier, NRBFNClassifier, cli
from scalenc.encoder.estimator import EncoderClassifier

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "scalenc"
EXE = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "scalenc.cli"]


def run(capsys, *argv):
    """Run `scalenc argv --format json` in-process; return (exit code, JSON summary, stderr)."""
    code = cli.main([str(a) for a in argv] + ["--format", "json"])
    out, err = capsys.readouterr()
    summary = json.loads(out) if out.strip() else None
    return code, summary, err


def run_text(capsys, *argv):
    """Run `scalenc argv` in-process as a user would; return (exit code, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_here(*argv):
    """`scalenc argv` in this process, as a batch job runs it (stderr not a terminal, no
    scheduler in the environment, Python's warning filters): (exit code, stdout, stderr). The command's code is the
    executable's; what only a process shows (signals, a terminal, the start-up) is tested
    through :func:`run_exe` and ``test_cli_output.run_exe_text``. Needs no fixture, so a
    module's shared fixtures use it too."""
    out, err = io.StringIO(), io.StringIO()
    scheduler = {
        k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SCALENC_SCHEDULER")
    }
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(),  # a new process's filters, not the test run's errors
        ):
            warnings.simplefilter("default")
            code = cli.main([str(a) for a in argv])
    finally:
        os.environ.update(scheduler)
    return code, out.getvalue(), err.getvalue()


def run_exe(*argv, timeout=120, env=None):
    """Run the real executable with `--format json`; return (code, JSON summary, stderr)."""
    proc = subprocess.run(
        [*EXE, *map(str, argv), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    summary = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, summary, proc.stderr


# --- data in every input format ------------------------------------------------------------


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n=600, p=5, K=3, seed=3, sep=1.5)
    return X, y


@pytest.fixture(scope="module")
def inputs(blobs, tmp_path_factory):
    """The same (X, y) as a Zarr group, a Parquet dataset, an .npz file and a CSV file."""
    X, y = blobs
    root = tmp_path_factory.mktemp("inputs")
    da.to_zarr(da.from_array(X, chunks=(150, -1)), str(root / "d.zarr"), component="X")
    da.to_zarr(da.from_array(y, chunks=150), str(root / "d.zarr"), component="y")
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]).assign(label=y)
    (root / "d.parquet").mkdir()
    frame.iloc[:300].to_parquet(root / "d.parquet" / "part-0.parquet", row_group_size=100)
    frame.iloc[300:].to_parquet(root / "d.parquet" / "part-1.parquet", row_group_size=100)
    np.savez(root / "d.npz", X=X, y=y)
    frame.to_csv(root / "d.csv", index=False)
    return {
        "zarr": [str(root / "d.zarr")],
        "parquet": [str(root / "d.parquet"), "--label-column", "label"],
        "npz": [str(root / "d.npz")],
        "csv": [str(root / "d.csv"), "--label-column", "label"],
    }


@pytest.fixture(scope="module")
def model_dir(inputs, tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m"
    assert (
        cli.main(
            [
                "fit",
                "encoder",
                "--data",
                *inputs["zarr"],
                "--model-out",
                str(path),
                "-q",
                "--json",
                str(path) + ".json",
                "--set",
                "kernels=linear,euclidean",
            ]
        )
        == 0
    )
    return path


@pytest.mark.parametrize("fmt", ["zarr", "parquet", "npz", "csv"])
def test_every_command_on_every_input_format(fmt, inputs, blobs, tmp_path, capsys):
    X, y = blobs
    data = inputs[fmt]
    oracle = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)

    code, fit, err = run(
        capsys,
        "fit",
        "encoder",
        "--data",
        *data,
        "--model-out",
        tmp_path / "m",
        "--set",
        "kernels=linear,euclidean",
        "--chunk-rows",
        200,
    )
    assert code == 0, err
    assert fit["status"] == "ok" and fit["command"] == "fit" and fit["exit_code"] == 0
    assert fit["estimator"] == "EncoderClassifier" and fit["params"]["kernels"] == [
        "linear",
        "euclidean",
    ]
    assert fit["data"] == {
        "path": data[0],
        "rows": 600,
        "features": 5,
        "dtype": "float64",
        "row_blocks": 3,
        "chunk_rows": 200,
        "labels": fit["data"]["labels"],
    }
    assert fit["passes"] == oracle.n_passes_ and fit["timings"]["fit_seconds"] > 0
    assert fit["model"]["kernel_"] == repr(oracle.kernel_)
    assert fit["outputs"]["model"] == str(tmp_path / "m")
    assert "fit: done in" in err

    code, pred, err = run(
        capsys,
        "predict",
        "--model",
        tmp_path / "m",
        "--data",
        *data,
        "--out",
        tmp_path / "pred.zarr",
    )
    assert code == 0, err
    assert pred["output"] == {
        "path": str(tmp_path / "pred.zarr"),
        "kind": "labels",
        "columns": ["prediction"],
        "rows": 600,
    }
    got = da.from_zarr(str(tmp_path / "pred.zarr")).compute()
    np.testing.assert_array_equal(got, oracle.predict(X))

    code, proba, err = run(
        capsys,
        "predict",
        "--model",
        tmp_path / "m",
        "--data",
        *data,
        "--out",
        tmp_path / "proba.parquet",
        "--proba",
    )
    assert code == 0, err
    frame = pd.read_parquet(tmp_path / "proba.parquet")
    assert list(frame.columns) == ["proba_0", "proba_1", "proba_2"] == proba["output"]["columns"]
    np.testing.assert_allclose(frame.to_numpy(), oracle.predict_proba(X), rtol=1e-10, atol=1e-12)

    code, emb, err = run(
        capsys,
        "embed",
        "--model",
        tmp_path / "m",
        "--data",
        *data,
        "--out",
        tmp_path / "emb.parquet",
    )
    assert code == 0, err
    np.testing.assert_allclose(
        pd.read_parquet(tmp_path / "emb.parquet").to_numpy(), oracle.transform(X), rtol=1e-10
    )

    code, ev, err = run(capsys, "evaluate", "--model", tmp_path / "m", "--data", *data)
    assert code == 0, err
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

    pred_np = oracle.predict(X)
    assert ev["scores"]["accuracy"] == pytest.approx(accuracy_score(y, pred_np))
    assert ev["scores"]["confusion_matrix"] == confusion_matrix(y, pred_np).tolist()
    assert ev["scores"]["macro_avg"]["f1"] == pytest.approx(f1_score(y, pred_np, average="macro"))
    assert ev["scores"]["labeled_rows"] == 600 and ev["passes"] == 1

    code, info, err = run(capsys, "info", "--model", tmp_path / "m")
    assert code == 0, err
    assert info["estimator"] == "scalenc.encoder.EncoderClassifier"
    assert info["classes"] == [0, 1, 2] and info["files"]["checksums"] == "verified"


def test_string_labels_to_zarr_and_parquet(blobs, tmp_path, capsys):
    X, y = blobs
    names = np.array(["ant", "bee", "cat"])[y]
    pd.DataFrame(X).rename(columns=str).assign(kind=names).to_parquet(tmp_path / "s.parquet")
    code, _, err = run(
        capsys,
        "fit",
        "lrc",
        "--data",
        tmp_path / "s.parquet",
        "--label-column",
        "kind",
        "--model-out",
        tmp_path / "m",
    )
    assert code == 0, err
    for out in ("p.zarr", "p.parquet"):
        code, _, err = run(
            capsys,
            "predict",
            "--model",
            tmp_path / "m",
            "--data",
            tmp_path / "s.parquet",
            "--label-column",
            "kind",
            "--out",
            tmp_path / out,
        )
        assert code == 0, err
    zarr_pred = da.from_zarr(str(tmp_path / "p.zarr")).compute()
    assert set(zarr_pred.tolist()) <= {"ant", "bee", "cat"}
    assert pd.read_parquet(tmp_path / "p.parquet")["prediction"].tolist() == zarr_pred.tolist()


@pytest.mark.parametrize(
    "method, estimator",
    [
        pytest.param("nrbfn", NRBFNClassifier, id="nrbfn"),
        pytest.param("lrc", LRClassifier, id="lrc"),
        pytest.param("ccdr", CCDR, id="ccdr"),
        pytest.param("ccdr-classifier", CCDRClassifier, id="ccdr-classifier"),
    ],
)
def test_other_methods(method, estimator, inputs, tmp_path, capsys):
    assert cli.METHODS[method].split(":")[1] == estimator.__name__
    params = ["--set", "random_state=0"] if method != "lrc" else []
    code, fit, err = run(
        capsys, "fit", method, "--data", *inputs["zarr"], "--model-out", tmp_path / "m", *params
    )
    assert code == 0, err
    assert fit["estimator"] == cli.METHODS[method].split(":")[1]
    command = ["embed"] if method == "ccdr" else ["predict"]
    code, out, err = run(
        capsys,
        *command,
        "--model",
        tmp_path / "m",
        "--data",
        inputs["zarr"][0],
        "--out",
        tmp_path / "o.zarr",
    )
    assert code == 0, err
    assert out["output"]["rows"] == 600


def test_make_data_zarr_and_parquet_match_simulate(tmp_path, capsys):
    from scalenc.simulate import simulate

    X, y = simulate("uniform_transformed", 3000, 12, 4, random_state=7)
    code, summary, err = run(
        capsys,
        "make-data",
        "uniform_transformed",
        "--n",
        3000,
        "--p",
        12,
        "--k",
        4,
        "--seed",
        7,
        "--chunk-rows",
        1000,
        "--out",
        tmp_path / "s.zarr",
    )
    assert code == 0, err
    assert summary["outputs"]["data"] == str(tmp_path / "s.zarr") and summary["row_blocks"] == 3
    from scalenc.io.inputs import load

    Xz, yz = load(tmp_path / "s.zarr")
    np.testing.assert_array_equal(Xz.compute(), X.compute())
    np.testing.assert_array_equal(yz.compute(), y.compute())
    import zarr

    assert (
        zarr.open_group(str(tmp_path / "s.zarr"), mode="r").attrs["setting"]
        == "uniform_transformed"
    )

    code, _, err = run(
        capsys,
        "make-data",
        "uniform_transformed",
        "--n",
        3000,
        "--p",
        12,
        "--k",
        4,
        "--seed",
        7,
        "--chunk-rows",
        1000,
        "--out",
        tmp_path / "s.parquet",
    )
    assert code == 0, err
    Xp, yp = load(tmp_path / "s.parquet", label_column="y")
    np.testing.assert_array_equal(Xp.compute(), X.compute())
    np.testing.assert_array_equal(yp.compute(), y.compute())
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


# --- outputs, logging, JSON --------------------------------------------------------------


def test_existing_output_needs_overwrite(model_dir, inputs, tmp_path, capsys):
    args = [
        "predict",
        "--model",
        model_dir,
        "--data",
        inputs["npz"][0],
        "--out",
        tmp_path / "p.zarr",
    ]
    assert run(capsys, *args)[0] == 0
    code, summary, err = run(capsys, *args)
    assert code == cli.EXIT_BAD_INPUT
    assert "exists; pass --overwrite to replace it" in summary["error"]["message"]
    assert "exists; pass --overwrite" in err
    assert run(capsys, *args, "--overwrite")[0] == 0


def test_json_file_quiet_and_verbose(model_dir, inputs, tmp_path, capsys):
    code, summary, err = run_text(
        capsys,
        "evaluate",
        "--model",
        model_dir,
        "--data",
        *inputs["zarr"],
        "--json",
        tmp_path / "s.json",
        "--quiet",
    )
    assert code == 0 and summary == "" and err == ""  # --quiet: nothing but the file
    written = json.loads((tmp_path / "s.json").read_text())
    assert written["status"] == "ok" and written["scores"]["accuracy"] > 0.9
    assert written["scheduler"] == {"kind": "threads"}
    code, summary, err = run(
        capsys, "evaluate", "--model", tmp_path / "missing", "--data", *inputs["zarr"], "--verbose"
    )
    assert code == cli.EXIT_BAD_INPUT and "does not exist" in err


def test_progress_lines_and_bar(model_dir, inputs, tmp_path, capsys):
    code, _, err = run(
        capsys,
        "predict",
        "--model",
        model_dir,
        "--data",
        inputs["zarr"][0],
        "--out",
        tmp_path / "a.zarr",
        "--progress",
        "lines",
        "--progress-interval",
        0,
    )
    assert code == 0
    assert "scalenc predict: pass 1/1 0% (0/" in err and "done in" in err
    code, _, err = run(
        capsys,
        "predict",
        "--model",
        model_dir,
        "--data",
        inputs["zarr"][0],
        "--out",
        tmp_path / "b.zarr",
        "--progress",
        "bar",
    )
    assert code == 0
    assert "\rpredict: pass 1/1 [" in err and "100%" in err and " done\n" in err


def test_set_values_are_parsed():
    assert cli.parse_value("3") == 3 and cli.parse_value("1e-5") == 1e-5
    assert cli.parse_value("linear") == "linear"
    assert cli.parse_value('["linear", "euclidean"]') == ["linear", "euclidean"]
    assert cli.parse_value("linear,euclidean") == ["linear", "euclidean"]
    assert cli.parse_value("(1, 2)") == (1, 2) and cli.parse_value("null") is None
    assert cli.parse_value("true") is True and cli.parse_value("0.5,1e-9") == [0.5, 1e-9]


# --- exit codes ------------------------------------------------------------------------------


BAD_INPUT_CASES = {
    "unknown parameter": (
        ["--set", "kernal=linear"],
        "EncoderClassifier has no parameter 'kernal'. Did you mean 'kernels'?",
    ),
    "bad parameter value": (
        ["--set", "min_improvement=2"],
        "The 'min_improvement' parameter of EncoderClassifier must be",
    ),
    "unknown kernel": (["--set", "kernels=linear,cosine"], "Unknown kernel 'cosine'"),
    "malformed --set": (["--set", "kernels"], "--set expects PARAM=VALUE"),
}


@pytest.mark.parametrize("case", BAD_INPUT_CASES, ids=list(BAD_INPUT_CASES))
def test_bad_parameters_exit_2(case, inputs, tmp_path, capsys):
    extra, message = BAD_INPUT_CASES[case]
    code, summary, err = run(
        capsys, "fit", "encoder", "--data", *inputs["zarr"], "--model-out", tmp_path / "m", *extra
    )
    assert code == cli.EXIT_BAD_INPUT == summary["exit_code"]
    assert summary["status"] == "error" and message in summary["error"]["message"]
    assert not (tmp_path / "m").exists()


@pytest.mark.filterwarnings("ignore:.*column 'label' is read as a feature:UserWarning")
def test_bad_inputs_exit_2(model_dir, inputs, tmp_path, capsys):
    cases = [
        (
            ["fit", "encoder", "--data", tmp_path / "nope.zarr", "--model-out", tmp_path / "m"],
            "--data '%s' does not exist" % (tmp_path / "nope.zarr"),
        ),
        (
            ["fit", "encoder", "--data", inputs["csv"][0], "--model-out", tmp_path / "m"],
            "No labels for",
        ),
        (
            ["fit", "svm", "--data", inputs["npz"][0], "--model-out", tmp_path / "m"],
            "invalid choice",
        ),
        (
            [
                "predict",
                "--model",
                model_dir,
                "--data",
                inputs["npz"][0],
                "--out",
                tmp_path / "p.txt",
            ],
            "Cannot tell the output format",
        ),
        (
            ["make-data", "normal", "--n", 10, "--p", 2, "--k", 3, "--out", tmp_path / "s.zarr"],
            "p ≥ K",
        ),
        (["run", tmp_path / "missing.toml"], "does not exist"),
    ]
    for argv, message in cases:
        code, summary, err = run(capsys, *argv)
        assert code == cli.EXIT_BAD_INPUT, (argv, err)
        assert message in (summary["error"]["message"] if summary else err), (argv, err)


def test_tampered_model_exit_2(model_dir, inputs, tmp_path, capsys):
    copy = tmp_path / "m"
    shutil.copytree(model_dir, copy)
    target = sorted((copy / "arrays").iterdir())[3]
    raw = bytearray(target.read_bytes())
    raw[-3] ^= 0x01
    target.write_bytes(bytes(raw))
    for argv in (
        ["info", "--model", copy],
        ["predict", "--model", copy, "--data", inputs["npz"][0], "--out", tmp_path / "p.zarr"],
    ):
        code, summary, _ = run(capsys, *argv)
        assert code == cli.EXIT_BAD_INPUT
        assert summary["error"]["type"] == "ModelFileError"
        assert "SHA-256 does not match" in summary["error"]["message"]
    assert not (tmp_path / "p.zarr").exists()


def test_damaged_chunk_is_bad_input_exit_2(model_dir, inputs, tmp_path):
    """A damaged Zarr chunk is found while the pass reads it: exit 2 (bad input), naming the
    store and the rows, from the real executable."""
    bad = tmp_path / "bad.zarr"
    shutil.copytree(inputs["zarr"][0], bad)
    chunk = sorted(p for p in (bad / "X").rglob("*") if p.is_file() and p.name != "zarr.json")[-1]
    chunk.write_bytes(os.urandom(64))
    code, summary, err = run_exe("evaluate", "--model", model_dir, "--data", bad)
    assert code == cli.EXIT_BAD_INPUT == summary["exit_code"], err
    assert summary["status"] == "error" and "error (exit 2)" in err
    assert "bad.zarr' array 'X'" in summary["error"]["message"]


def test_failure_during_computation_exit_4(model_dir, inputs, monkeypatch, capsys):
    """A failure inside a pass that is not the input's fault (here an injected bug in a
    block function): exit 4."""
    import scalenc.engine.passes

    def boom(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(scalenc.engine.passes, "confusion_counts", boom)
    code, summary, err = run(capsys, "evaluate", "--model", model_dir, "--data", inputs["zarr"][0])
    assert code == cli.EXIT_COMPUTE == summary["exit_code"], err
    assert summary["status"] == "error" and "error (exit 4)" in err
    assert "injected failure" in summary["error"]["message"]


def test_unreachable_scheduler_exit_3(inputs, tmp_path):
    t0 = time.perf_counter()
    code, summary, err = run_exe(
        "fit",
        "encoder",
        "--data",
        inputs["npz"][0],
        "--model-out",
        tmp_path / "m",
        "--scheduler",
        "tcp://127.0.0.1:9",
        "--connect-timeout",
        "1",
    )
    assert code == cli.EXIT_CLUSTER, err
    assert "Cannot use the Dask scheduler at tcp://127.0.0.1:9" in summary["error"]["message"]
    assert time.perf_counter() - t0 < 60
    assert not (tmp_path / "m").exists()


def test_scheduler_from_environment_exit_3(inputs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCALENC_SCHEDULER", "tcp://127.0.0.1:9")
    code, summary, err = run(capsys, "info", "--model", tmp_path, "--connect-timeout", 1)
    assert code == cli.EXIT_CLUSTER, err
    assert "Cannot use the Dask scheduler at tcp://127.0.0.1:9" in summary["error"]["message"]


def test_help_documents_exit_codes():
    proc = subprocess.run([*EXE, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for text in (
        "exit codes:",
        "bad input",
        "cannot be reached",
        "during the computation",
        "fit",
        "predict",
        "embed",
        "evaluate",
        "info",
        "make-data",
        "report",
        "run",
    ):
        assert text in proc.stdout
    proc = subprocess.run([*EXE, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("scalenc ")


def test_help_and_argument_errors_do_not_load_dask():
    """`scalenc --help` and usage errors are answered by the parser alone: a fast start-up."""
    script = (
        "import sys; from scalenc.cli import main; "
        "codes = [main(['--help']), main(['fit']), main(['fit', '--help'])]; "
        "heavy = {'dask', 'distributed', 'numpy', 'matplotlib', 'zarr', 'pyarrow'}; "
        "print(codes, sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.splitlines()[-1] == "[0, 2, 0] []", proc.stderr
    assert "scalenc fit: error: the following arguments are required: --data" in proc.stderr


# --- a run killed mid-write ----------------------------------------------------------------


def test_killed_mid_write_leaves_no_complete_looking_output(tmp_path):
    out = tmp_path / "big.zarr"
    argv = [
        "make-data",
        "normal",
        "--n",
        3_000_000,
        "--p",
        40,
        "--chunk-rows",
        5000,
        "--out",
        out,
        "-q",
    ]
    proc = subprocess.Popen(
        [*EXE, *map(str, argv)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            tmps = list(tmp_path.glob("big.zarr.tmp-*"))
            if tmps and sum(1 for _ in tmps[0].rglob("*")) > 20:
                break
            assert proc.poll() is None, "make-data finished before it could be killed; raise --n"
            time.sleep(0.05)
        else:
            pytest.fail("no temporary output appeared")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    assert [p.name.split(".tmp-")[0] for p in tmp_path.iterdir()] == ["big.zarr"]
    from scalenc.io.inputs import load

    with pytest.raises(
        FileNotFoundError,
        match=rf"big\.zarr' does not exist; the nearest part that exists is "
        rf"'{re.escape(str(tmp_path))}'\. Check the path\.",
    ):
        load(out)


# --- job files -------------------------------------------------------------------------------


def test_example_job_runs_end_to_end(tmp_path):
    """examples/job.toml: make-data, fit, predict, evaluate, report."""
    shutil.copy(REPO / "examples" / "job.toml", tmp_path / "job.toml")
    code, out, err = run_here(
        "run", tmp_path / "job.toml", "--progress", "lines", "--format", "json"
    )
    assert code == 0, err
    summary = json.loads(out)
    work = tmp_path / "scalenc-example"
    assert summary["workdir"] == str(work) and summary["status"] == "ok"
    commands = [s["command"] for s in summary["steps"]]
    assert commands == ["make-data", "make-data", "fit", "predict", "evaluate", "report"]
    assert all(s["status"] == "ok" for s in summary["steps"])
    fit, evaluate = summary["steps"][2], summary["steps"][4]
    assert fit["params"]["kernels"] == ["linear", "euclidean", "spearman"] and fit["passes"] >= 1
    assert evaluate["scores"]["accuracy"] > 0.95
    assert pd.read_parquet(work / "predictions.parquet").shape == (5000, 1)
    assert (work / "report.html").read_text().count("data:image/png;base64,") >= 3
    assert "run: step 6 (report)" in err


def test_job_errors_and_failed_step(inputs, tmp_path, capsys):
    job = tmp_path / "job.toml"
    job.write_text(
        '[[step]]\ncommand = "fit"\nmethod = "encoder"\ndata = "x.zarr"\nmodle_out = "m"\n'
    )
    code, summary, _ = run(capsys, "run", job)
    assert code == cli.EXIT_BAD_INPUT
    assert "step 1 (fit): unknown option 'modle_out'" in summary["error"]["message"]

    job.write_text('[[step]]\ncommand = "fit"\nmethod = "encoder"\nscheduler = "local"\n')
    code, summary, _ = run(capsys, "run", job)
    assert code == cli.EXIT_BAD_INPUT and "apply to the whole job" in summary["error"]["message"]

    job.write_text('[[step]]\ncommand = "run"\njob = "other.toml"\n')
    code, summary, _ = run(capsys, "run", job)
    assert code == cli.EXIT_BAD_INPUT
    assert (
        "step 1 (run): unknown command; use one of ['convert', 'embed', 'evaluate', 'fit', "
        "'info', 'make-data', 'predict', 'report']." in summary["error"]["message"]
    )

    job.write_text("[[step]\n")
    code, summary, _ = run(capsys, "run", job)
    assert code == cli.EXIT_BAD_INPUT and "is not valid TOML" in summary["error"]["message"]

    # the second step fails on bad input: the first one's result is kept, exit code 2
    job.write_text(f'''
[job]
workdir = "w"
[[step]]
command = "fit"
method = "encoder"
data = "{inputs["npz"][0]}"
model_out = "m"
[[step]]
command = "predict"
model = "m"
data = "{inputs["npz"][0]}"
out = "p.csv"
''')
    code, summary, _ = run(capsys, "run", job)
    assert code == cli.EXIT_BAD_INPUT and summary["status"] == "error"
    assert [s["status"] for s in summary["steps"]] == ["ok", "error"]
    assert summary["steps"][1]["error"]["exit_code"] == cli.EXIT_BAD_INPUT
    assert (tmp_path / "w" / "m" / "model.json").exists()


@pytest.mark.slow  # a LocalCluster started by the command (10-20 s); test_cluster's connect tests start one in the default run
@pytest.mark.cluster
def test_local_cluster_prints_dashboard(inputs, tmp_path):
    code, summary, err = run_exe(
        "fit",
        "encoder",
        "--data",
        inputs["npz"][0],
        "--model-out",
        tmp_path / "m",
        "--scheduler",
        "local",
        "--n-workers",
        1,
        "--progress",
        "lines",
        timeout=180,
    )
    assert code == 0, err
    assert summary["scheduler"]["kind"] == "distributed"
    assert summary["scheduler"]["address"].startswith("tcp://127.0.0.1:")
    assert summary["scheduler"]["dashboard"].startswith("http://127.0.0.1:")
    assert "dashboard: http://127.0.0.1:" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["fit", "encoder", "--data", "x.zarr", "--model-out", "m", "--chunk-rows", "0"],
            "argument --chunk-rows: must be at least 1, got 0",
        ),
        (
            ["fit", "encoder", "--data", "x.zarr", "--model-out", "m", "--connect-timeout", "-1"],
            "argument --connect-timeout: must be a number of seconds >= 0, got -1",
        ),
        (
            ["fit", "encoder", "--data", "x.zarr", "--model-out", "m", "--n-workers", "two"],
            "argument --n-workers: expected an integer, got 'two'",
        ),
        (
            ["make-data", "normal_noise", "--n", "10", "--p", "2", "--k", "1", "--out", "o.zarr"],
            "argument --k: must be at least 2, got 1",
        ),
    ],
)
def test_numbers_are_range_checked_before_anything_runs(tmp_path, argv, message):
    paths = {"x.zarr", "m", "o.zarr"}
    code, summary, err = run_exe(*[tmp_path / a if a in paths else a for a in argv])
    assert code == cli.EXIT_BAD_INPUT, err
    assert message in err
    assert list(tmp_path.iterdir()) == []


def test_a_job_is_checked_as_a_whole_before_its_first_step(inputs, tmp_path, capsys):
    """A later step's missing input, an existing output without overwrite and an output
    written twice are all found before any step runs: nothing is written."""
    npz = inputs["npz"][0]
    job = tmp_path / "job.toml"
    steps = {
        "missing input": (
            f'[[step]]\ncommand = "fit"\nmethod = "encoder"\ndata = "{npz}"\nmodel_out = "m"\n'
            '[[step]]\ncommand = "predict"\nmodel = "m"\ndata = "nope.zarr"\nout = "p.zarr"\n',
            "step 2 (predict): --data",
            "does not exist, and no earlier step writes it. Nothing was run.",
        ),
        "written twice": (
            f'[[step]]\ncommand = "fit"\nmethod = "encoder"\ndata = "{npz}"\nmodel_out = "m"\n'
            f'[[step]]\ncommand = "fit"\nmethod = "lrc"\ndata = "{npz}"\nmodel_out = "m"\n',
            "step 2 (fit): --model-out",
            "is also written by step 1 (fit). Nothing was run.",
        ),
    }
    for name, (text, where, message) in steps.items():
        job.write_text('[job]\nworkdir = "w"\n' + text)
        code, summary, _ = run(capsys, "run", job)
        assert code == cli.EXIT_BAD_INPUT, name
        assert where in summary["error"]["message"] and message in summary["error"]["message"]
        assert not (tmp_path / "w" / "m").exists(), name
    (tmp_path / "w" / "p.zarr").mkdir(parents=True)
    job.write_text(
        '[job]\nworkdir = "w"\n'
        f'[[step]]\ncommand = "fit"\nmethod = "encoder"\ndata = "{npz}"\nmodel_out = "m"\n'
        f'[[step]]\ncommand = "predict"\nmodel = "m"\ndata = "{npz}"\nout = "p.zarr"\n'
    )
    code, summary, _ = run(capsys, "run", job)
    assert code == cli.EXIT_BAD_INPUT
    assert "p.zarr exists; set overwrite = true for that step" in summary["error"]["message"]
    assert not (tmp_path / "w" / "m").exists()


def test_a_missing_input_is_reported_before_an_existing_output(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    code, summary, _ = run(
        capsys, "fit", "encoder", "--data", tmp_path / "nope.zarr", "--model-out", tmp_path / "m"
    )
    assert code == cli.EXIT_BAD_INPUT
    assert (
        "--data" in summary["error"]["message"] and "does not exist" in summary["error"]["message"]
    )


def test_evaluate_says_when_labels_hold_an_unseen_class(model_dir, blobs, tmp_path, capsys):
    X, y = blobs
    y = y.copy()
    y[:7] = 9  # a class the model never saw
    np.savez(tmp_path / "d.npz", X=X, y=y)
    code, summary, err = run(capsys, "evaluate", "--model", model_dir, "--data", tmp_path / "d.npz")
    assert code == 0 and summary["scores"]["unknown_label_rows"] == 7
    assert "7 labeled row(s) have a class the model was not fitted on" in err


# --- what a user sees: text summary, JSON numbers, --help, progress, errors ----------------


def test_every_command_prints_a_short_text_summary(inputs, tmp_path, capsys):
    """Without --format json, stdout holds a few lines: what ran, its key results, the
    passes and times, and the output paths; --json FILE adds the file's path."""
    npz = inputs["npz"][0]
    m, pred, emb, html = (tmp_path / n for n in ("m", "p.zarr", "e.parquet", "r.html"))
    commands = {
        "make-data": (
            ["make-data", "normal_noise", "--n", 300, "--p", 6, "--k", 3, "--chunk-rows", 300]
            + ["--out", tmp_path / "s.zarr"],
            ["make-data normal_noise: 300 rows × 6 features, 3 classes, seed 0, float32, "
             "1 row block", "written in", f"data: {tmp_path / 's.zarr'}"],
        ),
        "fit": (
            ["fit", "encoder", "--data", npz, "--model-out", m]
            + ["--set", "kernels=linear,euclidean", "--json", tmp_path / "fit.json"],
            [f"fit encoder (EncoderClassifier) on {npz} (600 rows × 5 features, 1 row block)",
             "kernel chosen: linear (cross-entropy per labeled row: linear ",
             "2 passes over the data in ",
             f"model: {m}", f"JSON summary: {tmp_path / 'fit.json'}"],
        ),
        "predict": (
            ["predict", "--model", m, "--data", npz, "--out", pred],
            [f"predict {npz} (600 rows × 5 features, 1 row block) with {m} "
             "(EncoderClassifier): labels", "1 pass over the data in ", f"predictions: {pred}"],
        ),
        "embed": (
            ["embed", "--model", m, "--data", npz, "--out", emb],
            [": embedding", f"embedding: {emb}"],
        ),
        "evaluate": (
            ["evaluate", "--model", m, "--data", npz],
            ["evaluate ", "accuracy 0.9", " on 600 labeled rows (balanced 0.9"],
        ),
        "info": (
            ["info", "--model", m],
            [f"info {m}: scalenc.encoder.EncoderClassifier", "classes (3): 0, 1, 2",
             "kernel chosen: linear", "checksums verified"],
        ),
        "report": (
            ["report", "--model", m, "--data", npz, "--out", html],
            [f"report on {m} (EncoderClassifier)", "accuracy 0.9", f"report: {html}"],
        ),
    }  # fmt: skip
    for name, (argv, expected) in commands.items():
        code, out, err = run_text(capsys, *argv)
        assert code == 0, (name, err)
        lines = out.splitlines()
        assert 3 <= len(lines) <= 7, out
        assert lines[-1].startswith(("done in ", "JSON summary: ")), out
        for text in expected:
            assert text in out, (name, text, out)
        assert "{" not in out, out  # no JSON
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["status"] == "ok" and fit["passes"] == 2

    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nworkdir = "w"\n[[step]]\ncommand = "fit"\nmethod = "lrc"\ndata = "{npz}"\n'
        f'model_out = "m"\n[[step]]\ncommand = "evaluate"\nmodel = "m"\ndata = "{npz}"\n'
    )
    code, out, err = run_text(capsys, "run", job)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"run {job}: 2 steps in {tmp_path / 'w'}"
    assert lines[1].startswith("  step 1 (fit) ") and "fit lrc (LRClassifier)" in lines[1]
    assert lines[2] == f"      → {tmp_path / 'w' / 'm'}"
    assert lines[3].startswith("  step 2 (evaluate) ") and lines[-1].startswith("done in ")


def test_failed_command_text_goes_to_stderr_only(inputs, tmp_path, capsys):
    """A failed command prints nothing on stdout; a failed job lists its steps."""
    code, out, err = run_text(capsys, "info", "--model", tmp_path / "missing")
    assert code == cli.EXIT_BAD_INPUT and out == ""
    assert "error (exit 2): --model" in err and "does not exist" in err
    npz = inputs["npz"][0]
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nworkdir = "w"\n[[step]]\ncommand = "fit"\nmethod = "lrc"\ndata = "{npz}"\n'
        f'model_out = "m"\n[[step]]\ncommand = "predict"\nmodel = "m"\ndata = "{npz}"\n'
        'out = "p.csv"\n'
    )
    code, out, err = run_text(capsys, "run", job)
    lines = out.splitlines()
    assert code == cli.EXIT_BAD_INPUT and lines[1].startswith("  step 1 (fit) "), out
    assert lines[3].startswith("  step 2 (predict) failed (exit 2): Cannot tell the output")
    assert lines[-1].startswith("failed in ")


def test_format_json_prints_the_whole_summary_with_rounded_numbers(model_dir, inputs, capsys):
    code = cli.main(["evaluate", "--model", str(model_dir), "--data", inputs["npz"][0]]
                    + ["--format", "json", "-q"])  # fmt: skip
    out = capsys.readouterr().out
    summary = json.loads(out)
    assert code == 0 and summary["status"] == "ok" and summary["scores"]["accuracy"] > 0.9
    floats = re.findall(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?", out)
    assert floats and all(len(re.sub(r"e.*|[-.]", "", f).strip("0")) <= 12 for f in floats)


def test_rounding_rule():
    from scalenc.cli.summary import rounded

    assert rounded(0.9999999999999999) == 1.0 and rounded(1 / 3) == 0.333333333333
    assert rounded(float(np.float32(0.3))) == 0.3  # float32 results: float32's digits
    assert rounded(float(np.float32(1 / 3))) == 0.33333334
    assert rounded(2.5) == 2.5 and rounded(0.1) == 0.1 and rounded(1e300) == 1e300
    assert rounded({"a": [1e-320, 7, True, None, "x"]}) == {"a": [1e-320, 7, True, None, "x"]}


@pytest.mark.parametrize("method", sorted(cli.METHODS))
def test_fit_method_help_lists_the_estimators_parameters(method, capsys):
    """`scalenc fit METHOD --help`: every parameter of the estimator with its default (as
    --set would take it), its type and its docstring's first sentence."""
    import inspect

    from scalenc.cli.commands import estimator_class

    assert cli.main(["fit", method, "--help"]) == 0
    out = capsys.readouterr().out
    cls = estimator_class(method)
    assert f"estimator parameters of {method} ({cls.__name__}), set with --set" in out
    for param in inspect.signature(cls).parameters.values():
        default = json.dumps(list(param.default) if isinstance(param.default, tuple)
                             else param.default)  # fmt: skip
        assert f"\n  {param.name}={default}" in out, param.name
    assert out.index("estimator parameters") < out.index("exit codes:")
    if method == "encoder":
        assert (
            '\n  kernels=["linear", "euclidean", "spearman"]  sequence of str, Kernel or callable\n'
            in out
        )
        assert "\n  min_improvement=0.3  float in [0, 1)\n      A kernel replaces the first" in out
    if method == "ccdr-classifier":  # "As for :class:`CCDR`" is looked up in CCDR's docs
        assert '\n  n_components="auto"  int or "auto"\n      m, the embedding dimension.' in out
    assert cli.main(["fit", "--help"]) == 0
    assert "estimator parameters" not in capsys.readouterr().out


def test_parameter_docs_parser():
    from scalenc.cli.estimator_help import parameter_docs

    class Example:
        """Summary.

        Parameters
        ----------
        alpha : float ≥ 0, default=1e-4
            λ, relative to ``‖A‖²``. See :func:`numpy.linalg.eigh`, e.g. ``eigh(a)``. More.
        b, c,
        d
            Three at once.

        Attributes
        ----------
        x_ : int
        """

    docs = parameter_docs(Example)
    assert docs["alpha"] == (
        "float ≥ 0",
        "λ, relative to ‖A‖². See numpy.linalg.eigh, e.g. eigh(a). More.",
    )
    assert docs["b"] == docs["c"] == docs["d"] == ("", "Three at once.") and "x_" not in docs


def test_progress_counts_passes_over_the_data_and_shows_an_eta(tmp_path):
    import io

    from scalenc.cli.progress import Progress, _Display, stage
    from scalenc.io.inputs import load
    from scalenc.io.outputs import write_dataset

    X, y = make_blobs(n=400, p=3, K=2, seed=0)
    write_dataset(da.from_array(X, chunks=(100, -1)), da.from_array(y, chunks=100),
                  tmp_path / "d.zarr")  # fmt: skip
    Xd, yd = load(tmp_path / "d.zarr")
    out = io.StringIO()
    with Progress("fit", mode="lines", stream=out, interval=0, data=Xd):
        Xd.sum().compute()
        yd.max().compute()  # labels only: not a pass over the data
        with stage("gram"):
            (Xd * 2).sum().compute()
    text = out.getvalue()
    assert "scalenc fit: pass 1 0% (0/" in text and "scalenc fit: after pass 1 0% (0/" in text
    assert "scalenc fit: pass 2 (gram) 100% (" in text and "pass 3" not in text

    display = _Display("predict", "bar", io.StringIO(), 10.0, passes=1)
    display.start(1, True)
    display._start -= 5  # 5 s in: an ETA from the tasks done so far
    display._bar(0, 1, time.monotonic())
    assert "predict: pass 1/1 [" in display.stream.getvalue()
    assert "0/1 task " in display.stream.getvalue() and "ETA" not in display.stream.getvalue()
    display = _Display("fit", "lines", io.StringIO(), 10.0)
    display.start(40, True)
    display._start -= 5.0
    display.update(10, 40, force=True)
    assert "fit: pass 1 25% (10/40 tasks) 5.0s, ETA 15.0s\n" in display.stream.getvalue()


def test_fit_progress_numbers_the_passes_the_summary_counts(inputs, tmp_path, capsys):
    code, summary, err = run(
        capsys, "fit", "encoder", "--data", *inputs["zarr"], "--model-out", tmp_path / "m",
        "--set", "kernels=linear,euclidean", "--progress", "lines", "--progress-interval", 0,
    )  # fmt: skip
    assert code == 0 and summary["passes"] == 2, err
    started = re.findall(r"scalenc fit: (.+) 0% \(0/\d+ tasks\) started", err)
    # the labels read into memory once (not a pass over X), the two passes, then the
    # pass over the cached embedding, which re-reads no data
    assert started == ["before the first pass", "pass 1", "pass 2", "after pass 2"]
    assert "fit: done in" in err and ", 2 passes over the data" in err


def test_argument_errors_use_argparses_layout(capsys):
    """Usage first, then `PROG: error: MESSAGE`, exit 2: what argparse itself prints."""
    import argparse

    from scalenc.cli.parser import build_parser

    assert cli.main(["fit", "encoder"]) == 2
    err = capsys.readouterr().err
    usage = build_parser().commands["fit"].format_usage()
    # --data is shown required where it is missing, optional in --help (--edges alone)
    assert err == usage.replace("[--data PATH]", "--data PATH") + "scalenc fit: error: the " \
        "following arguments are required: --data, --model-out\n"  # fmt: skip
    assert usage.startswith("usage: scalenc fit [-h]")
    assert cli.main(["fitt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: scalenc [-h] [--version] COMMAND ...\nscalenc: error: ")
    assert "argument COMMAND: invalid choice: 'fitt'" in err
    stock = argparse.ArgumentParser(prog="scalenc fit")
    stock.add_argument("--data", required=True)
    with pytest.raises(SystemExit, match=r"^2$") as exit_info:  # str(SystemExit(2)) == "2"
        stock.parse_args([])
    stock_err = capsys.readouterr().err
    assert exit_info.value.code == 2 and stock_err.splitlines()[1].startswith("scalenc fit: error:")


@pytest.mark.parametrize(
    "command",
    [
        ["fit", "encoder", "--data", "{missing}", "--model-out", "{existing}"],
        ["fit", "encoder", "--data", "{npz}", "--labels", "{missing}/y.npy",
         "--model-out", "{existing}"],
        ["predict", "--model", "{model}", "--data", "{missing}", "--out", "{existing}"],
        ["predict", "--model", "{missing}", "--data", "{npz}", "--out", "{existing}"],
        ["embed", "--model", "{model}", "--data", "{missing}", "--out", "{existing}"],
        ["report", "--model", "{model}", "--data", "{missing}", "--out", "{existing}"],
        ["report", "--model", "{missing}", "--out", "{existing}"],
    ],
    ids=["fit-data", "fit-labels", "predict-data", "predict-model", "embed-data",
         "report-data", "report-model"],
)  # fmt: skip
def test_a_missing_input_is_reported_before_an_existing_output_by_every_command(
    command, model_dir, inputs, tmp_path, capsys
):
    (tmp_path / "out").mkdir()
    paths = {"missing": tmp_path / "nope", "existing": tmp_path / "out", "model": model_dir,
             "npz": inputs["npz"][0]}  # fmt: skip
    argv = [a.format(**paths) for a in command]
    flag = argv[argv.index(next(a for a in argv if a.startswith(str(tmp_path / "nope")))) - 1]
    code, summary, _ = run(capsys, *argv)
    assert code == cli.EXIT_BAD_INPUT
    assert summary["error"]["message"].startswith(f"{flag} '{tmp_path / 'nope'}")
    assert "does not exist" in summary["error"]["message"]


def test_quickstart_removes_its_files_unless_kept(tmp_path, monkeypatch, capsys):
    import importlib.util
    import tempfile

    spec = importlib.util.spec_from_file_location("quickstart", REPO / "examples" / "quickstart.py")
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.delenv("SCALENC_QUICKSTART_KEEP", raising=False)
    quickstart.main([])
    out = capsys.readouterr().out
    assert "kernel chosen: " in out and "test accuracy 1.0000" in out
    assert "files removed (keep them with --keep DIR)" in out
    assert list((tmp_path / "tmp").iterdir()) == []

    monkeypatch.setenv("SCALENC_QUICKSTART_KEEP", str(tmp_path / "kept"))
    quickstart.main([])
    out = capsys.readouterr().out
    kept = tmp_path / "kept"
    assert sorted(p.name for p in kept.iterdir()) == [
        "X.zarr",
        "pred.zarr",
        "summary.json",
        "y.zarr",
    ]
    summary = json.loads((kept / "summary.json").read_text())
    assert f"JSON summary: {kept / 'summary.json'}" in out
    assert summary["predictions"] == str(kept / "pred.zarr") and summary["test_accuracy"] == 1.0
    assert list((tmp_path / "tmp").iterdir()) == []


def test_an_output_without_a_format_names_the_commands_option(inputs, model_dir, tmp_path, capsys):
    """`predict --out pred.csv` says to pass --out-format (the command's option, not the
    Python argument), before anything is read or written."""
    for command in ("predict", "embed"):
        out = tmp_path / f"{command}.csv"
        code, summary, _ = run(
            capsys, command, "--model", model_dir, "--data", *inputs["npz"], "--out", out
        )
        assert code == cli.EXIT_BAD_INPUT
        message = summary["error"]["message"]
        assert f"Cannot tell the output format of --out '{out}'" in message
        assert "pass --out-format zarr (or parquet)" in message and "format=" not in message
        assert not out.exists()


def test_a_misspelt_job_key_lists_every_valid_key(tmp_path, capsys):
    """The job file's [job] keys listed in the error include the step defaults it accepts
    there (overwrite, chunk_rows, storage_option), which the example job file uses."""
    job = tmp_path / "job.toml"
    job.write_text('[job]\noverwite = true\n[[step]]\ncommand = "info"\nmodel = "m"\n')
    code, summary, _ = run(capsys, "run", job)
    assert code == cli.EXIT_BAD_INPUT
    message = summary["error"]["message"]
    assert "unknown [job] key(s) ['overwite']" in message
    for key in ("'overwrite'", "'chunk_rows'", "'storage_option'", "'scheduler'", "'workdir'"):
        assert key in message
