"""What the `scalenc` command prints on stderr, from the real executable (as in test_cli.py):
warnings one line each, no Dask extension-dtype warning for string labels, the event log
only where it is asked for, and SIGINT/SIGTERM from the first instant of the command."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import make_blobs
from test_cli import EXE

from scalenc import EncoderClassifier, cli, save_model
from scalenc.io import write_dataset

#: A log line (or a progress line): ``HH:MM:SS scalenc ...``.
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d scalenc ", re.MULTILINE)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALENC_SCHEDULER")}
    return {**env, **extra}


def _default_sigint():
    """In the child before exec: SIGINT's default action (a test run in the background
    passes SIGINT on ignored, and an ignored signal stays ignored in the command)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_exe_text(*argv, timeout=120, env=None):
    """The real executable as a batch job runs it (stderr not a terminal): (code, out, err)."""
    proc = subprocess.run(
        [*EXE, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**(env or {})),
    )
    return proc.returncode, proc.stdout, proc.stderr


def run_on_terminal(*argv, timeout=120):
    """The real executable with stderr on a pseudo-terminal, as typed in a shell:
    (code, stdout, stderr as it stands on the screen line by line)."""
    master, replica = pty.openpty()
    proc = subprocess.Popen(
        [*EXE, *map(str, argv)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=replica,
        env=_env(),
    )
    os.close(replica)
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.1)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command closed its end
                break
            if not chunk:
                break
            seen += chunk
    os.close(master)
    out = proc.stdout.read().decode()
    proc.stdout.close()
    code = proc.wait(timeout=10)
    text = seen.decode().replace("\r\n", "\n")
    screen = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))  # bar redraws
    return code, out, screen


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A Zarr dataset, a model fitted on it, and a CSV whose column 'label' is a feature."""
    X, y = make_blobs(n=400, p=3, K=2, seed=5)
    root = tmp_path_factory.mktemp("output")
    write_dataset(da.from_array(X, chunks=(100, 3)), da.from_array(y, chunks=100), root / "d.zarr")
    save_model(EncoderClassifier(kernels=("linear",)).fit(X, y), root / "m")
    pd.DataFrame(X, columns=["a", "b", "label"]).to_csv(root / "w.csv", index=False)
    return root


# --- warnings ------------------------------------------------------------------------------


def test_a_warning_is_one_line_without_a_path(data, tmp_path):
    """The library's DataWarning (a column named 'label' read as a feature) as the command
    shows it: `warning: MESSAGE`, not Python's `file.py:LINE: DataWarning:` and source line."""
    code, out, err = run_exe_text(
        "predict", "--model", data / "m", "--data", data / "w.csv", "--out", tmp_path / "p.zarr"
    )
    assert code == 0, err
    warned = [line for line in err.splitlines() if "is read as a feature" in line]
    assert warned == [
        "warning: "
        f"{data / 'w.csv'}: column 'label' is read as a feature because no label column was "
        "named; pass label_column='label' (--label-column label) if it holds the labels."
    ], err
    assert ".py:" not in err and "Warning:" not in err and "warnings.warn" not in err, err
    code, out, err = run_exe_text(
        "predict", "--model", data / "m", "--data", data / "w.csv", "--out", tmp_path / "q.zarr",
        "--quiet",
    )  # fmt: skip
    assert code == 0 and out == "" and err == ""  # --quiet: errors only


def test_a_repeated_warning_prints_once(data, tmp_path):
    """Two job steps read the same CSV: the warning is raised twice (shown each time by
    Python here, with -W always), printed once."""
    job = tmp_path / "job.toml"
    step = f'[[step]]\ncommand = "predict"\nmodel = "{data / "m"}"\ndata = "{data / "w.csv"}"\n'
    job.write_text(f'[job]\nworkdir = "w"\n{step}out = "p1.zarr"\n{step}out = "p2.zarr"\n')
    code, out, err = run_exe_text("run", job, env={"PYTHONWARNINGS": "always"})
    assert code == 0, err
    warned = [line for line in err.splitlines() if "is read as a feature" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: "), err


def test_the_previous_warning_display_is_restored(data, tmp_path, capsys):
    """The command shows warnings its own way while it runs; the library's callers keep
    Python's display after it."""
    before = warnings.showwarning
    assert cli.main(["info", "--model", str(data / "m"), "-q"]) == 0
    capsys.readouterr()
    assert warnings.showwarning is before


# --- string labels: no Dask extension-dtype warning ----------------------------------------


def _string_label_frame() -> pd.DataFrame:
    X, y = make_blobs(n=200, p=3, K=2, seed=7)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    frame["label"] = pd.Series(np.where(y == 0, "cat", "dog"), dtype="string")
    return frame


# the CSV reader's labels as Parquet's: CI's slow run (a command)
@pytest.mark.parametrize("fmt", ["parquet", pytest.param("csv", marks=pytest.mark.slow)])
def test_a_string_label_column_gives_no_extension_dtype_warning(fmt, tmp_path):
    path = tmp_path / f"s.{fmt}"
    frame = _string_label_frame()
    frame.to_parquet(path) if fmt == "parquet" else frame.to_csv(path, index=False)
    code, out, err = run_exe_text(
        "fit", "encoder", "--data", path, "--label-column", "label", "--model-out", tmp_path / "m",
        env={"PYTHONWARNINGS": "error:Dask currently has limited support:UserWarning"},
    )  # fmt: skip
    assert code == 0, err
    assert "extension dtype" not in err and "warning" not in err, err
    assert json.loads((tmp_path / "m" / "model.json").read_text())


def test_dask_string_labels_convert_without_a_warning():
    """A Dask DataFrame's `string` (or categorical, or nullable integer) label column: its
    partitions become object arrays explicitly (pytest turns any warning into an error)."""
    frame = _string_label_frame()
    features = frame[["a", "b", "c"]]
    ddf = dd.from_pandas(frame, npartitions=3)
    model = EncoderClassifier().fit(ddf[["a", "b", "c"]], ddf["label"])
    assert model.classes_.tolist() == ["cat", "dog"]
    assert model.score(ddf[["a", "b", "c"]], ddf["label"].astype("category")) > 0.9
    reference = EncoderClassifier().fit(features, frame["label"])
    np.testing.assert_array_equal(
        np.asarray(model.predict(ddf[["a", "b", "c"]])), reference.predict(features)
    )


# --- the event log: beside progress lines or with --verbose --------------------------------


def test_a_terminal_shows_no_log_without_verbose(data, tmp_path):
    """In a shell: the progress bar and the summary, no event log; --verbose adds it."""
    argv = ["fit", "encoder", "--data", data / "d.zarr", "--model-out", tmp_path / "m"]
    code, out, err = run_on_terminal(*argv)
    assert code == 0, err
    assert out.startswith("fit encoder (EncoderClassifier) on "), out
    assert LOG_LINE.search(err) is None, err
    assert "fit: pass 1" in err  # the bar
    code, out, err = run_on_terminal(*argv, "--overwrite", "--verbose")
    assert code == 0, err
    assert re.search(r"^\d\d:\d\d:\d\d scalenc data .*d\.zarr: 400 rows x 3 features", err, re.M)
    assert re.search(r"^\d\d:\d\d:\d\d scalenc fit: model saved to ", err, re.M), err


@pytest.mark.slow  # a fit slowed to print progress lines (20-50 s); the terminal's log test stays in the default run
def test_a_batch_log_has_the_events_beside_the_progress_lines(data, tmp_path):
    """stderr not a terminal: progress as lines, and a timestamped line per event with them;
    without progress (--progress none) no events unless --verbose."""
    argv = ["fit", "encoder", "--data", data / "d.zarr", "--model-out", tmp_path / "m"]
    code, out, err = run_exe_text(*argv)
    assert code == 0, err
    assert re.search(r"^\d\d:\d\d:\d\d scalenc fit: model saved to ", err, re.M), err
    code, out, err = run_exe_text(*argv, "--overwrite", "--progress", "none")
    assert code == 0 and err == "", err
    code, out, err = run_exe_text(*argv, "--overwrite", "--progress", "none", "--verbose")
    assert code == 0 and LOG_LINE.search(err), err


# --- SIGINT and SIGTERM from the first instant -------------------------------------------


def _handles_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler (Linux: /proc/PID/status); Python itself
    sets none, so this says the command's handlers are in place."""
    try:
        with open(f"/proc/{pid}/status") as status:
            caught = next(line for line in status if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def _start(argv, *, command=None):
    proc = subprocess.Popen(
        command or [*EXE, *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(PYTHONUNBUFFERED="1"),
        preexec_fn=_default_sigint,
    )
    return proc, time.monotonic()


def _when_handled(proc, started: float, delay: float) -> None:
    """Wait for `delay` s after the start, and at least until the command's handlers are in
    place: before, the interpreter is still starting up (tens of ms, out of the command's
    reach)."""
    deadline = started + 60
    while not _handles_sigterm(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.001)
    time.sleep(max(0.0, started + delay - time.monotonic()))


SIGNALS = [
    (signal.SIGINT, cli.EXIT_INTERRUPTED, "SIGINT (Ctrl-C)"),
    (signal.SIGTERM, cli.EXIT_TERMINATED, "SIGTERM"),
]

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/PID/status; POSIX signals"
)


@linux_only
@pytest.mark.parametrize(
    "delay, sig, code, signame",
    [
        (0.05, *SIGNALS[0]),
        (0.3, *SIGNALS[1]),
        # the other two pairings of delay and signal: CI's slow run (a command each)
        pytest.param(0.3, *SIGNALS[0], marks=pytest.mark.slow),
        pytest.param(0.05, *SIGNALS[1], marks=pytest.mark.slow),
    ],
)
def test_a_signal_while_the_command_starts(data, tmp_path, delay, sig, code, signame):
    """While the libraries load: the command stops before reading anything, with the exit
    code, its one-line message and its summary; no traceback."""
    summary_path = tmp_path / "fit.json"
    argv = ["fit", "encoder", "--data", data / "d.zarr", "--model-out", tmp_path / "m"]
    proc, started = _start([*argv, "--json", summary_path, "--progress", "none"])
    _when_handled(proc, started, delay)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    message = (
        f"scalenc fit was interrupted by {signame}; outputs it had not finished were "
        f"discarded and their paths ({tmp_path / 'm'}) left as they were."
    )
    assert proc.returncode == code, err
    assert "Traceback" not in err and out == ""
    assert re.fullmatch(
        rf"\d\d:\d\d:\d\d scalenc error \(exit {code}\): {re.escape(message)}\n", err
    )
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "error" and summary["exit_code"] == code
    assert summary["error"]["message"] == message
    assert not (tmp_path / "m").exists()


@linux_only
def test_a_second_signal_while_starting_stops_at_once(data, tmp_path):
    """Ctrl-C twice while the libraries load: the process ends at once, one line, no
    traceback and nothing written."""
    argv = ["fit", "encoder", "--data", data / "d.zarr", "--model-out", tmp_path / "m"]
    proc, started = _start([*argv, "--json", tmp_path / "fit.json"])
    _when_handled(proc, started, 0.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)  # two pending SIGINTs would be one
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d scalenc error \(exit 130\): scalenc fit was interrupted by SIGINT "
        r"\(Ctrl-C\) while starting; nothing was read or written\.\n",
        err,
    ), err
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == []


#: The `scalenc` command with its Dask tasks slowed to 50 ms each (a scheduler callback),
#: saying on stderr when the first task starts.
SLOW_COMMAND = """
import sys, time
from dask.callbacks import Callback
from scalenc.cli import main

def pretask(key, dsk, state):
    if not pretask.started:
        pretask.started = True
        print("test: tasks running", file=sys.stderr, flush=True)
    time.sleep(0.05)

pretask.started = False
Callback(pretask=pretask).register()
sys.exit(main())
"""


@linux_only
@pytest.mark.parametrize("sig, code, signame", SIGNALS)
def test_a_signal_during_the_fit(data, tmp_path, sig, code, signame):
    argv = ["fit", "encoder", "--data", data / "d.zarr", "--model-out", tmp_path / "m"]
    command = [sys.executable, "-c", SLOW_COMMAND, *map(str, argv), "--progress", "none"]
    proc, _ = _start(argv, command=command)
    seen = ""
    while "test: tasks running" not in seen:
        line = proc.stderr.readline()
        assert line, (seen, proc.communicate())
        seen += line
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    err = seen + err
    assert proc.returncode == code, err
    assert "Traceback" not in err and out == ""
    assert f"scalenc error (exit {code}): scalenc fit was interrupted by {signame}; " in err
    assert len([line for line in err.splitlines() if "interrupted" in line]) == 1
