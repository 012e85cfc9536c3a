"""Faults on real processes: writers killed or interrupted mid-write and during the swap, and
the command sent SIGTERM / SIGINT mid-fit.

Each case asserts the exit code, the message, and what is on disk afterwards: the final
path holds its complete old or complete new content (never nothing, never a mixture), and no
temporary survives a handled signal. The swap is hit deterministically through the writer's
test hook ``scalenc.io.atomic._swap_hook``, set in the child process; the fallback without
``renameat2`` is forced there by removing the exchange.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import make_blobs

from scalenc import cli
from scalenc.encoder.estimator import EncoderClassifier
from scalenc.io import atomic as _atomic
from scalenc.io import tempnames as _tempnames
from scalenc.io.outputs import write_dataset, write_output
from scalenc.persist import load_model, save_model

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

OLD, NEW = 1.0, 2.0
ROWS, BLOCK = 4000, 100

#: A child that writes a (ROWS, 4) array of VALUE to TARGET with overwrite, block by block
#: (each block sleeping BLOCK_SLEEP s), handling SIGTERM as the command does; with PAUSE > 0
#: it stops PAUSE s at the swap, saying so on stdout. MODE "fallback" removes renameat2.
WRITER = f"""
import signal, sys, time
import dask.array as da
from scalenc.io import atomic as _atomic
from scalenc.cli.errors import Terminated
from scalenc.io import write_output

target, mode, pause, block_sleep, value = sys.argv[1:6]

def terminate(signum, frame):
    raise Terminated()

def at_swap(path):
    print("at swap", flush=True)
    time.sleep(float(pause))

def slow(block):
    time.sleep(float(block_sleep))
    return block

signal.signal(signal.SIGTERM, terminate)
if mode == "fallback":
    _atomic._renameat2 = lambda: None
if float(pause):
    _atomic._swap_hook = at_swap
arr = da.full(({ROWS}, 4), float(value), chunks=({BLOCK}, 4)).map_blocks(slow, dtype=float)
try:
    write_output(arr, target, overwrite=True)
except KeyboardInterrupt as exc:
    print("interrupted", type(exc).__name__, flush=True)
    sys.exit(9)
print("done", flush=True)
"""

#: The `scalenc` command, its Dask tasks slowed to 50 ms each (a scheduler callback, not a
#: change to scalenc), saying on stderr when the first task starts.
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


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALENC_SCHEDULER")}
    return {**env, "PYTHONUNBUFFERED": "1"}


def _wait_for(stream, text: str, proc, timeout: float = 60) -> str:
    """Read the unbuffered pipe ``stream`` until ``text`` appears; return what was read."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen and time.monotonic() < deadline:
        if select.select([stream], [], [], 0.1)[0]:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            seen += chunk
    if text.encode() not in seen:
        proc.kill()
        pytest.fail(f"never saw {text!r}; exit {proc.wait()}, output:\n{seen.decode()}")
    return seen.decode()


def _finish(proc, timeout: float = 60) -> tuple[str, str]:
    """Wait for the child; its remaining stdout and stderr as text."""
    out, err = proc.communicate(timeout=timeout)
    return out.decode(), err.decode()


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def _values(path) -> set:
    return set(np.unique(zarr.open_array(str(path), mode="r")[:]).tolist())


def _default_sigint():
    """In the child before exec: SIGINT's default action. A test run started in the
    background (``cmd &`` from a script, ``nohup``) passes SIGINT on ignored, and Python
    started with SIGINT ignored never raises KeyboardInterrupt: the interrupt tests
    then saw writers finish as if never signalled."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def spawn():
    """Start a child (stdout and stderr piped as text); it is killed and reaped after the test."""
    procs = []

    def start(*argv):
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env=_env(),
            preexec_fn=_default_sigint,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def _writer(spawn, target: Path, mode: str, *, pause: float = 0, block_sleep: float = 0):
    return spawn(sys.executable, "-c", WRITER, target, mode, pause, block_sleep, NEW)


def _old_output(tmp_path: Path) -> Path:
    target = tmp_path / "out.zarr"
    write_output(da.full((ROWS, 4), OLD, chunks=(BLOCK, 4)), target)
    return target


# --- the writer, signalled during the swap ----------------------------------------------------


@pytest.mark.parametrize(
    "sig, mode",
    [
        (signal.SIGINT, "exchange"),
        (signal.SIGTERM, "fallback"),
        # the other two pairings: CI's slow run (a writer process each, 10-25 s)
        pytest.param(signal.SIGINT, "fallback", marks=pytest.mark.slow),
        pytest.param(signal.SIGTERM, "exchange", marks=pytest.mark.slow),
    ],
)
def test_signal_during_the_swap_leaves_old_or_new_and_no_temporary(spawn, tmp_path, mode, sig):
    """With the exchange the swap is one system call: a signal before it keeps the old
    result. In the fallback the signal is deferred between the two renames: the new result
    is published, then the signal acts. Either way: a complete result, nothing beside it."""
    target = _old_output(tmp_path)
    # the writer waits 2 s at the swap for the signal: 0.5 s was too short for this
    # process to read "at swap" and signal on a loaded machine (the writer then finished)
    proc = _writer(spawn, target, mode, pause=2.0)
    _wait_for(proc.stdout, "at swap", proc)
    if mode == "fallback":  # between the two renames: the old result is aside
        assert not target.exists() and any(".old-" in n for n in _siblings(target))
    proc.send_signal(sig)
    out, err = _finish(proc)
    name = "Terminated" if sig == signal.SIGTERM else "KeyboardInterrupt"
    assert proc.returncode == 9 and f"interrupted {name}" in out, err
    assert _values(target) == ({OLD} if mode == "exchange" else {NEW})
    assert _siblings(target) == []


@pytest.mark.parametrize("mode", ["exchange", "fallback"])
def test_sigkill_during_the_swap_is_repaired_by_the_next_write(spawn, tmp_path, mode):
    """SIGKILL cannot be deferred. With the exchange the old result stays at its path; in the
    fallback the path is missing beside its backup (the documented window), and the next
    write of the path restores the backup before anything else."""
    target = _old_output(tmp_path)
    proc = _writer(spawn, target, mode, pause=30)
    _wait_for(proc.stdout, "at swap", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    left = _siblings(target)
    assert [n.split(".", 2)[2].split("-")[0] for n in left] == (
        ["tmp"] if mode == "exchange" else ["old", "tmp"]
    )
    if mode == "exchange":
        assert _values(target) == {OLD}
    else:
        assert not target.exists()
        assert _values(target.parent / next(n for n in left if ".old-" in n)) == {OLD}
    with pytest.raises(FileExistsError, match="out.zarr exists; pass overwrite=True"):
        write_output(da.full((ROWS, 4), NEW, chunks=(BLOCK, 4)), target)
    assert _values(target) == {OLD} and _siblings(target) == []


# --- the writer, signalled mid-write ---------------------------------------------------------


def _wait_for_blocks(target: Path, proc, n: int = 3) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for tmp in target.parent.glob(f"{target.name}.tmp-*"):
            if sum(1 for p in tmp.rglob("*") if p.is_file() and p.name != "zarr.json") >= n:
                return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    pytest.fail("no block was written")


@pytest.mark.parametrize(
    "sig",
    # SIGTERM is handled as SIGINT is (the swap tests run both): CI's slow run
    [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL],
)
def test_signal_mid_write_keeps_the_old_result(spawn, tmp_path, sig):
    """Blocks are being written to the temporary: the old result is untouched; a handled
    signal removes the temporary (outlasting in-flight block writes), SIGKILL leaves it to
    the next write of the path."""
    target = _old_output(tmp_path)
    proc = _writer(spawn, target, "exchange", block_sleep=0.05)
    _wait_for_blocks(target, proc)
    proc.send_signal(sig)
    out, err = _finish(proc)
    assert _values(target) == {OLD}
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert [n.split("-")[0] for n in _siblings(target)] == ["out.zarr.tmp"]
        write_output(da.full((ROWS, 4), NEW, chunks=(BLOCK, 4)), target, overwrite=True)
        assert _values(target) == {NEW}
    else:
        name = "Terminated" if sig == signal.SIGTERM else "KeyboardInterrupt"
        assert proc.returncode == 9 and f"interrupted {name}" in out, err
    assert _siblings(target) == []


# --- every output goes through the one writer (in-process) -----------------------------------


@pytest.fixture(scope="module")
def fitted():
    X, y = make_blobs(n=2000, p=8, K=3, seed=5, sep=2.0)
    return X, y, EncoderClassifier().fit(X, y)


@pytest.mark.parametrize("mode", ["exchange", "fallback"])
def test_every_output_is_swapped_in_by_the_one_writer(tmp_path, monkeypatch, fitted, mode):
    """Data outputs, datasets, model directories and text replace an existing result through
    the same swap (its hook sees each), in both modes, and leave nothing beside it."""
    X, y, model = fitted
    if mode == "fallback":
        monkeypatch.setattr(_atomic, "_renameat2", lambda: None)
    swapped = []
    monkeypatch.setattr(_atomic, "_swap_hook", lambda path: swapped.append(Path(path).name))
    Xd = da.from_array(X, chunks=(500, 8))
    targets = {
        "p.parquet": lambda over: write_output(Xd[:, :2], tmp_path / "p.parquet", overwrite=over),
        "d.zarr": lambda over: write_dataset(Xd, y, tmp_path / "d.zarr", overwrite=over),
        "m": lambda over: save_model(model, tmp_path / "m", overwrite=over),
        "r.txt": lambda over: _atomic.write_text(tmp_path / "r.txt", "new", overwrite=over),
    }
    for name, write in targets.items():
        write(False)
        with pytest.raises(FileExistsError, match=f"{name} exists; pass overwrite=True"):
            write(False)
        write(True)
    assert swapped == list(targets)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(targets)
    assert (tmp_path / "r.txt").read_text() == "new"
    np.testing.assert_array_equal(load_model(tmp_path / "m").predict(X), model.predict(X))


@pytest.mark.parametrize("mode", ["exchange", "fallback"])
def test_a_path_another_job_created_meanwhile_is_not_replaced(tmp_path, monkeypatch, mode):
    """Without overwrite, a path that appears while the result is written (another job on the
    same output) is kept: the publish refuses it, and the temporary is removed."""
    if mode == "fallback":
        monkeypatch.setattr(_atomic, "_renameat2", lambda: None)
    target = tmp_path / "r.txt"
    with pytest.raises(FileExistsError, match="r.txt exists; pass overwrite=True"):
        with _atomic.atomic_path(target) as tmp:
            Path(tmp).write_text("ours")
            target.write_text("theirs")
    assert target.read_text() == "theirs" and _siblings(target) == []


def test_a_write_from_another_thread_swaps_without_handlers(tmp_path, monkeypatch):
    """Off the main thread no signal handler can be set: the fallback proceeds without."""
    monkeypatch.setattr(_atomic, "_renameat2", lambda: None)
    target = tmp_path / "r.txt"
    target.write_text("old")
    errors = []

    def write():
        try:
            _atomic.write_text(target, "new", overwrite=True)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    assert errors == [] and target.read_text() == "new" and _siblings(target) == []


def test_stale_backup_beside_a_present_path_is_removed(tmp_path):
    """A writer killed after its swap (before deleting the backup) leaves a backup beside the
    new result: the next write removes it, keeping the path; a live writer's is kept."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    target = tmp_path / "r.txt"
    target.write_text("current")
    host = _tempnames._host()
    stale = tmp_path / f"r.txt.old-{host}-{dead}-0123abcd"
    live = tmp_path / f"r.txt.old-{host}-{os.getppid()}-0123abcd"
    stale.write_text("older")
    live.write_text("older")
    assert _tempnames.repair_abandoned(target) == [str(stale)]
    assert target.read_text() == "current" and _siblings(target) == [live.name]


# --- the command: SIGTERM and SIGINT mid-fit --------------------------------------------------


@pytest.fixture(scope="module")
def train(tmp_path_factory, fitted):
    """A Zarr dataset of 20 row blocks and a model fitted on it (the "old" result)."""
    X, y, model = fitted
    root = tmp_path_factory.mktemp("train")
    write_dataset(da.from_array(X, chunks=(100, 8)), y, root / "d.zarr")
    save_model(model, root / "m")
    return root


def _tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        digest.update(str(p.relative_to(path)).encode())
        if p.is_file():
            digest.update(p.read_bytes())
    return digest.hexdigest()


def _copy_model(train: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(train / "m", tmp_path / "model"))


@pytest.mark.parametrize(
    "sig, code, signame",
    [
        (signal.SIGTERM, cli.EXIT_TERMINATED, "SIGTERM"),
        # the same stop by Ctrl-C: CI's slow run (test_cli_output's signal tests run both)
        pytest.param(
            signal.SIGINT, cli.EXIT_INTERRUPTED, "SIGINT (Ctrl-C)", marks=pytest.mark.slow
        ),
    ],
)
def test_fit_overwrite_interrupted_mid_fit(spawn, train, tmp_path, fitted, sig, code, signame):
    X, _, old = fitted
    model = _copy_model(train, tmp_path)
    before = _tree_digest(model)
    summary_path = tmp_path / "fit.json"
    argv = ["fit", "encoder", "--data", train / "d.zarr", "--model-out", model, "--overwrite"]
    argv += ["--json", summary_path, "-q"]
    proc = spawn(sys.executable, "-c", SLOW_COMMAND, *argv)
    _wait_for(proc.stderr, "test: tasks running", proc)
    proc.send_signal(sig)
    _, err = _finish(proc)
    summary = json.loads(summary_path.read_text())
    message = (
        f"scalenc fit was interrupted by {signame}; outputs it had not finished were "
        f"discarded and their paths ({model}) left as they were."
    )
    assert proc.returncode == code == summary["exit_code"], err
    assert summary["status"] == "error" and summary["error"]["message"] == message
    assert summary["error"]["type"] == (
        "Terminated" if sig == signal.SIGTERM else "KeyboardInterrupt"
    )
    assert f"scalenc error (exit {code}): {message}" in err
    assert _tree_digest(model) == before
    np.testing.assert_array_equal(load_model(model).predict(X), old.predict(X))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.json", "model"]


def test_job_step_sent_sigterm_names_the_step(spawn, train, tmp_path):
    """`scalenc run`: the step that was running is named, in the summary and in the log."""
    model = _copy_model(train, tmp_path)
    before = _tree_digest(model)
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nworkdir = "{tmp_path}"\noverwrite = true\n\n'
        f'[[step]]\ncommand = "fit"\nmethod = "encoder"\ndata = "{train / "d.zarr"}"\n'
        f'model_out = "{model}"\n'
    )
    summary_path = tmp_path / "run.json"
    proc = spawn(sys.executable, "-c", SLOW_COMMAND, "run", job, "--json", summary_path, "-q")
    _wait_for(proc.stderr, "test: tasks running", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = _finish(proc)
    summary = json.loads(summary_path.read_text())
    message = (
        f"step 1 (fit) of {job} was interrupted by SIGTERM; outputs it had not finished were "
        f"discarded and their paths ({model}) left as they were."
    )
    assert proc.returncode == 143 == summary["exit_code"], err
    assert summary["status"] == "error" and summary["error"]["message"] == message
    assert summary["steps"] == [
        {
            "step": 1,
            "command": "fit",
            "status": "error",
            "error": {"type": "Terminated", "message": message, "exit_code": 143},
        }
    ]
    assert f"scalenc error (exit 143): {message}" in err
    assert _tree_digest(model) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.toml", "model", "run.json"]


def test_command_restores_the_signal_handlers(train, capsys):
    """Importing the library sets no handler (this process imported it all); the command sets
    its SIGTERM handler for the run only."""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert cli.main(["info", "--model", str(train / "m"), "-q"]) == 0
    capsys.readouterr()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
