"""The `scalenc` command: in-process through `main(argv)`, and the real executable by subprocess."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import pytest
from conftest import make_blobs

from scalenc import cli
from scalenc.encoder import EncoderClassifier

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "scalenc"
EXE = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "scalenc.cli"]


def run(capsys, *argv):
    """Run `scalenc argv` in-process; return (exit code, JSON summary, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    summary = json.loads(out) if out.strip() else None
    return code, summary, err


def run_exe(*argv, timeout=120, env=None):
    proc = subprocess.run(
        [*EXE, *map(str, argv)],
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
        "lrc" if _has("scalenc.nrbfn") else "encoder",
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


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("method", ["nrbfn", "lrc", "ccdr", "ccdr-classifier"])
def test_other_methods(method, inputs, tmp_path, capsys):
    module = cli.METHODS[method].split(":")[0]
    if not _has(module):
        pytest.skip(f"{module} is not written yet")
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
    from scalenc.data import load

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
    code, summary, err = run(
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
    assert code == 0 and summary is None and err == ""
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
    assert "scalenc predict: computation 1 0% (0/" in err and "done in" in err
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
    assert "\rpredict #1 [" in err and "100%" in err and " done\n" in err


def test_set_values_are_parsed():
    assert cli.parse_value("3") == 3 and cli.parse_value("1e-5") == 1e-5
    assert cli.parse_value("linear") == "linear"
    assert cli.parse_value('["linear", "euclidean"]') == ["linear", "euclidean"]
    assert cli.parse_value("linear,euclidean") == ["linear", "euclidean"]
    assert cli.parse_value("(1, 2)") == (1, 2) and cli.parse_value("null") is None
    assert cli.parse_value("true") is True and cli.parse_value("0.5,1e-9") == [0.5, 1e-9]


# --- exit codes ------------------------------------------------------------------------------


BAD_INPUT_CASES = {
    "unknown parameter": (["--set", "kernal=linear"], "Invalid parameter 'kernal'"),
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


def test_failure_during_computation_exit_4(model_dir, inputs):
    """A failure inside a pass that is not the input's fault (here an injected bug in a
    block function of the real executable's process): exit 4."""
    code = (
        "import sys, scalenc._blocks as b\n"
        "def boom(*a, **k): raise RuntimeError('injected failure')\n"
        "b.confusion_counts = boom\n"
        "from scalenc.cli import main\n"
        "sys.exit(main())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "evaluate", "--model", str(model_dir)]
        + ["--data", str(inputs["zarr"][0])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = json.loads(proc.stdout)
    assert proc.returncode == cli.EXIT_COMPUTE == summary["exit_code"], proc.stderr
    assert summary["status"] == "error" and "error (exit 4)" in proc.stderr
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


def test_scheduler_from_environment_exit_3(inputs, tmp_path):
    code, summary, _ = run_exe(
        "info",
        "--model",
        tmp_path,
        "--connect-timeout",
        1,
        env={"SCALENC_SCHEDULER": "tcp://127.0.0.1:9"},
        timeout=120,
    )
    assert code == cli.EXIT_CLUSTER


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
        "import sys; from scalenc.cli import main; codes = [main(['--help']), main(['fit'])]; "
        "heavy = {'dask', 'distributed', 'numpy', 'matplotlib', 'zarr', 'pyarrow'}; "
        "print(codes, sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.splitlines()[-1] == "[0, 2] []", proc.stderr
    assert "scalenc fit: the following arguments are required: --data, METHOD" in proc.stderr


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
    from scalenc.data import load

    with pytest.raises(FileNotFoundError):
        load(out)


# --- job files -------------------------------------------------------------------------------


def test_example_job_runs_end_to_end(tmp_path):
    """examples/job.toml from the real executable: make-data, fit, predict, evaluate, report."""
    shutil.copy(REPO / "examples" / "job.toml", tmp_path / "job.toml")
    code, summary, err = run_exe("run", tmp_path / "job.toml", "--progress", "lines", timeout=300)
    assert code == 0, err
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
        "step 1 (run): unknown command; use one of ['embed', 'evaluate', 'fit', 'info', "
        "'make-data', 'predict', 'report']." in summary["error"]["message"]
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
