"""What a batch job on a shared machine meets besides signals (issue 17): a full disk, a
read-only input, two jobs writing the same output. Real file systems: small tmpfs mounts
(skipped where mounting is not permitted)."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

from scalenc import EncoderClassifier, load, load_model, save_model, write_output
from scalenc.io.outputs import write_dataset

SCALENC = str(Path(sys.executable).with_name("scalenc"))


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return proc.returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "2m"):
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 4000)
    return rng.normal(size=(4000, 6)) + y[:, None], y


def test_a_full_disk_keeps_the_old_output_and_leaves_no_temporary(small_disk, data):
    X, y = data
    out = small_disk / "pred.zarr"
    write_output(da.from_array(y[:1000], chunks=500), out)  # small: fits
    big = da.from_array(np.random.default_rng(1).random((200_000, 4)), chunks=(20_000, -1))
    with pytest.raises(OSError, match="No space left on device"):
        write_output(big, out, overwrite=True)  # 6.4 MB on a 2 MB disk
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], y[:1000])
    assert sorted(p.name for p in small_disk.iterdir()) == ["pred.zarr"]


def test_the_command_on_a_full_disk_exits_4_and_keeps_the_old_model(small_disk, data, tmp_path):
    X, y = data
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000),
                  tmp_path / "d.zarr")  # fmt: skip
    model = small_disk / "m"
    save_model(EncoderClassifier().fit(X, y), model)
    free = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"\0" * (free.f_bavail * free.f_frsize - 64 * 2**10))
    proc = subprocess.run(
        [SCALENC, "fit", "encoder", "--data", str(tmp_path / "d.zarr"), "--model-out", str(model)]
        + ["--overwrite", "--set", "kernels=linear,euclidean", "--json", str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = json.loads((tmp_path / "s.json").read_text())
    assert proc.returncode == 4, proc.stderr
    assert "No space left on device" in summary["error"]["message"]
    assert load_model(model).predict(X[:5]).shape == (5,)  # the old model, intact
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "m"]


def test_a_read_only_input_is_read_and_never_written(tmp_path, data):
    X, y = data
    store = tmp_path / "ro"
    if not _mount_tmpfs(store, "8m"):
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000),
                      store / "d.zarr")  # fmt: skip
        subprocess.run(["mount", "-o", "remount,ro", str(store)], check=True)
        with pytest.raises(OSError, match=r"Read-only file system"):
            (store / "probe").write_text("x")  # really read-only, even for root
        Xd, yd = load(store / "d.zarr")
        model = EncoderClassifier(kernels=("linear", "euclidean")).fit(Xd, yd)
        np.testing.assert_array_equal(
            model.predict(Xd).compute(),
            EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y).predict(X),
        )
        write_output(model.predict(Xd), tmp_path / "p.zarr")
    finally:
        subprocess.run(["umount", "-l", str(store)], check=False)


def test_two_jobs_writing_the_same_output_leave_one_complete_result(tmp_path):
    """Each writer has its own temporary; the path ends with one writer's complete result
    and nothing else is left."""
    out = tmp_path / "p.zarr"
    write_output(da.zeros(1000, chunks=100), out)
    values = {1.0: da.ones(50_000, chunks=5_000), 2.0: da.full(50_000, 2.0, chunks=5_000)}
    errors = []

    def job(arr):
        try:
            write_output(arr, out, overwrite=True)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(arr,)) for arr in values.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    result = zarr.open_array(str(out), mode="r")[:]
    assert result.shape == (50_000,) and len(set(result.tolist())) == 1
    assert result[0] in values
    assert [p.name for p in tmp_path.iterdir()] == ["p.zarr"]
    assert os.path.isdir(out)
