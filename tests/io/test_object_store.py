"""Inputs and outputs on object stores and other fsspec file systems (issue 11): an
in-memory file system, and a real S3-compatible server (moto's, on 127.0.0.1, the way s3fs
tests itself) reached through s3fs, read by a loopback Dask cluster's workers."""

import socket

import dask.array as da
import fsspec
import numpy as np
import pytest
import zarr
from test_cli import run_here

from scalenc import EncoderClassifier, load, write_output
from scalenc.io.atomic import INCOMPLETE, IncompleteOutputError
from scalenc.io.outputs import write_dataset


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 3000)
    return rng.normal(size=(3000, 6)) + y[:, None], y


@pytest.fixture
def memory():
    fs = fsspec.filesystem("memory")
    yield fs
    for root in ("/scalenc-out",):
        if fs.exists(root):
            fs.rm(root, recursive=True)


@pytest.mark.parametrize("name", ["pred.zarr", "pred.parquet"])
def test_outputs_to_a_memory_url_are_published_whole(memory, data, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    X, y = data
    model = EncoderClassifier().fit(X, y)
    url = f"memory://scalenc-out/{name}"
    pred = model.predict(da.from_array(X, chunks=(700, -1)))
    write_output(pred, url)
    with pytest.raises(FileExistsError, match=f"{url} exists; pass overwrite=True"):
        write_output(pred, url)
    write_output(pred, url, overwrite=True)
    if name.endswith(".zarr"):
        got = zarr.open_array(url, mode="r")[:]
    else:
        got = np.concatenate(
            [
                np.asarray(__import__("pandas").read_parquet(memory.open(f, "rb"))["value"])
                for f in sorted(memory.find("/scalenc-out/pred.parquet"))
            ]
        )
    np.testing.assert_array_equal(got, model.predict(X))
    assert memory.find("/scalenc-out") == sorted(memory.find("/scalenc-out"))
    assert not [p for p in memory.find("/scalenc-out") if ".tmp-" in p or INCOMPLETE in p]
    assert list(tmp_path.iterdir()) == []  # no stray local 'memory:' folder


def test_an_interrupted_publish_is_never_read_as_a_result(memory, data):
    X, y = data
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000),
                  "memory://scalenc-out/d.zarr")  # fmt: skip
    Xd, yd = load("memory://scalenc-out/d.zarr")
    np.testing.assert_array_equal(Xd.compute(), X)
    memory.pipe(f"/scalenc-out/d.zarr/{INCOMPLETE}", b"")  # a publish that was cut
    with pytest.raises(IncompleteOutputError, match="incomplete result: its writer stopped"):
        load("memory://scalenc-out/d.zarr")


# --- a real S3-compatible server ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on 127.0.0.1 and a bucket; skipped with the reason if it cannot
    start. Yields the storage options that reach it."""
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    port = _free_port()
    try:
        server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
    except Exception as exc:  # noqa: BLE001 - any start failure is a reason to skip
        pytest.skip(f"moto's S3 server cannot start here: {exc}")
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
    }
    fs = fsspec.filesystem("s3", **options)
    fs.mkdir("scalenc-bucket")
    yield options
    server.stop()


def test_fit_from_s3_and_write_predictions_and_a_dataset_back(s3, data):
    X, y = data
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000),
                  "s3://scalenc-bucket/train.zarr", storage_options=s3)  # fmt: skip
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000),
                  "s3://scalenc-bucket/train.parquet", storage_options=s3)  # fmt: skip
    reference = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y).predict(X)
    for url, kwargs in [
        ("s3://scalenc-bucket/train.zarr", {}),
        ("s3://scalenc-bucket/train.parquet", {"label_column": "y"}),
    ]:
        Xd, yd = load(url, storage_options=s3, **kwargs)
        model = EncoderClassifier(kernels=("linear", "euclidean")).fit(Xd, yd)
        np.testing.assert_array_equal(model.predict(Xd).compute(), reference, err_msg=url)
    write_output(model.predict(Xd), "s3://scalenc-bucket/pred.zarr", storage_options=s3)
    got = zarr.open_array("s3://scalenc-bucket/pred.zarr", mode="r", storage_options=s3)[:]
    np.testing.assert_array_equal(got, reference)
    fs = fsspec.filesystem("s3", **s3)
    assert not [p for p in fs.find("scalenc-bucket") if ".tmp-" in p or INCOMPLETE in p]


def test_a_missing_bucket_or_object_is_a_clear_error(s3):
    with pytest.raises(FileNotFoundError, match="no part of it exists .*check the bucket"):
        load("s3://no-such-bucket/x.zarr", storage_options=s3)
    with pytest.raises(
        FileNotFoundError, match="nearest part that exists is 's3://scalenc-bucket'"
    ):
        load("s3://scalenc-bucket/nope/x.parquet", storage_options=s3)


@pytest.mark.slow  # a job of three commands on S3; the command's storage options test stays in the default run
def test_storage_options_in_a_job_file(s3, data, tmp_path):
    """A job's [job] table holds the storage options for every step."""
    import json

    X, y = data
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000),
                  "s3://scalenc-bucket/job.zarr", storage_options=s3)  # fmt: skip
    table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in s3.items() if k != "client_kwargs")
    endpoint = s3["client_kwargs"]["endpoint_url"]
    (tmp_path / "job.toml").write_text(
        f'[job]\nstorage_option = {{ {table}, client_kwargs = {{ endpoint_url = "{endpoint}" }} }}\n'
        '[[step]]\ncommand = "fit"\nmethod = "lrc"\ndata = "s3://scalenc-bucket/job.zarr"\n'
        'model_out = "s3://scalenc-bucket/job-model"\n'
    )
    code, _, err = run_here("run", tmp_path / "job.toml", "--json", tmp_path / "run.json")
    assert code == 0, err[-2000:]
    assert s3["secret"] + '"' not in (tmp_path / "run.json").read_text()
    fs = fsspec.filesystem("s3", **s3)
    assert fs.exists("scalenc-bucket/job-model/model.json")


@pytest.mark.slow  # a cluster's workers reading S3 (10-20 s); the threaded S3 reads above stay in the default run
@pytest.mark.cluster
def test_a_loopback_cluster_reads_s3_on_its_workers(s3, data, client, monkeypatch):
    """The workers read the S3 chunks themselves: the client process fetches no chunk of X
    (only metadata), and the model equals the one fitted on the NumPy data."""
    import s3fs

    X, y = data
    url = "s3://scalenc-bucket/cluster.zarr"
    write_dataset(da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500), url,
                  storage_options=s3)  # fmt: skip
    fetched = []
    original = s3fs.S3FileSystem._cat_file

    async def counting(self, path, *args, **kwargs):
        fetched.append(path)
        return await original(self, path, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", counting)  # this process only
    Xd, yd = load(url, storage_options=s3)
    model = EncoderClassifier(kernels=("linear", "euclidean")).fit(Xd, yd)
    predictions = model.predict(Xd).compute()
    chunk_reads = [path for path in fetched if "/X/c/" in path or "/y/c/" in path]
    assert chunk_reads == [], chunk_reads[:5]
    assert any(path.endswith("zarr.json") for path in fetched)  # the client read metadata
    reference = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    np.testing.assert_allclose(model.class_means_, reference.class_means_, rtol=1e-10)
    np.testing.assert_array_equal(predictions, reference.predict(X))


@pytest.mark.slow  # four commands on S3 (10-20 s); the API's S3 reads and writes above and test_parquet_and_urls' storage options of the command stay in the default run
def test_the_command_reads_and_writes_s3_with_storage_options(s3, data, tmp_path):
    """The batch steps with every data and model path on the object store."""
    import json

    X, y = data
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000),
                  "s3://scalenc-bucket/cmd.zarr", storage_options=s3)  # fmt: skip
    options = [
        "--storage-option", f"key={s3['key']}",
        "--storage-option", f"secret={s3['secret']}",
        "--storage-option", f"client_kwargs={json.dumps(s3['client_kwargs'])}",
    ]  # fmt: skip
    code, _, err = run_here(
        "fit", "encoder", "--data", "s3://scalenc-bucket/cmd.zarr", *options,
        "--model-out", "s3://scalenc-bucket/cmd-model", "--json", tmp_path / "fit.json",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run_here(
        "predict", "--model", "s3://scalenc-bucket/cmd-model", "--data",
        "s3://scalenc-bucket/cmd.zarr", *options, "--out", "s3://scalenc-bucket/cmd-pred.zarr",
    )  # fmt: skip
    assert code == 0, err
    got = zarr.open_array("s3://scalenc-bucket/cmd-pred.zarr", mode="r", storage_options=s3)[:]
    np.testing.assert_array_equal(got, EncoderClassifier().fit(X, y).predict(X))
    summary = (tmp_path / "fit.json").read_text()
    assert s3["secret"] not in summary.replace("secret=***", "")


def test_models_saved_to_and_loaded_from_s3(s3, data):
    from scalenc import load_model, save_model

    X, y = data
    model = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    url = "s3://scalenc-bucket/models/encoder"
    save_model(model, url, storage_options=s3)
    with pytest.raises(FileExistsError, match=f"{url} exists"):
        save_model(model, url, storage_options=s3)
    save_model(EncoderClassifier().fit(X, y), url, overwrite=True, storage_options=s3)
    loaded = load_model(url, storage_options=s3)
    np.testing.assert_array_equal(loaded.predict(X), EncoderClassifier().fit(X, y).predict(X))
    fs = fsspec.filesystem("s3", **s3)
    assert not [p for p in fs.find("scalenc-bucket/models") if ".tmp-" in p or INCOMPLETE in p]
    fs.pipe(f"scalenc-bucket/models/encoder/{INCOMPLETE}", b"")
    with pytest.raises(
        IncompleteOutputError,
        match=f"{url} is an incomplete result: its writer stopped while publishing it "
        rf"\(it holds the marker {INCOMPLETE}\)",
    ):
        load_model(url, storage_options=s3)


@pytest.mark.slow  # 23 s: four command runs; the S3 command test below stays in the default run
def test_the_readme_batch_example_runs_unchanged_on_s3(s3, tmp_path):
    """README's batch commands, word for word, with ``W`` an S3 prefix of the test server;
    credentials and endpoint come from the environment, as on a real cluster."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Batch runs from the command line", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    lines = [line for line in block.replace("\\\n", " ").splitlines() if line.startswith("scalenc")]
    assert len(lines) == 6
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "W": "s3://scalenc-bucket/batch",
        "AWS_ACCESS_KEY_ID": s3["key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret"],
        "AWS_ENDPOINT_URL": s3["client_kwargs"]["endpoint_url"],
        "MPLBACKEND": "Agg",
    }
    for line in lines:
        proc = subprocess.run(
            ["bash", "-c", line], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
        )
        assert proc.returncode == 0, (line, proc.stderr[-2000:])
    fs = fsspec.filesystem("s3", **s3)
    written = {p.rsplit("/", 1)[-1] for p in fs.ls("scalenc-bucket/batch")}
    assert {"train.zarr", "test.zarr", "model", "fit.json", "predictions.parquet"} <= written
    assert {"evaluate.json", "report.html"} <= written
    evaluation = __import__("json").loads(fs.cat("scalenc-bucket/batch/evaluate.json"))
    assert evaluation["status"] == "ok" and evaluation["scores"]["accuracy"] > 0.5
    assert list(tmp_path.iterdir()) == []  # nothing written locally


def test_a_write_killed_while_publishing_on_s3_never_loads_as_complete(s3, data, tmp_path):
    """A real process SIGKILLed in the middle of publishing an output on S3 (after the
    marker, while the old objects are being replaced): the prefix is refused by load."""
    import json
    import signal
    import subprocess
    import sys

    X, y = data
    url = "s3://scalenc-bucket/killed.zarr"
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000), url,
                  storage_options=s3)  # fmt: skip
    code = f"""
import json, sys, time
import dask.array as da, numpy as np
import scalenc.io.atomic as atomic
from scalenc.io import write_dataset
def pause(path):
    print("publishing", flush=True)
    time.sleep(60)
atomic._swap_hook = pause
X = da.ones((3000, 6), chunks=(1000, -1))
write_dataset(X, da.zeros(3000, chunks=1000, dtype=int), {url!r},
              storage_options=json.loads({json.dumps(json.dumps(s3))}), overwrite=True)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "publishing", child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)  # reaps the child and closes its pipes
    with pytest.raises(IncompleteOutputError, match="killed.zarr is an incomplete result"):
        load(url, storage_options=s3)
    write_dataset(da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000), url,
                  storage_options=s3, overwrite=True)  # fmt: skip
    np.testing.assert_array_equal(load(url, storage_options=s3)[0].compute(), X)
