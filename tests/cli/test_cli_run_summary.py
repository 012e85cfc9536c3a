"""`scalenc run`'s text summary: each step's line carries its key result, the kernel a fit
chose and the accuracy an evaluation scored."""

from __future__ import annotations

from scalenc import cli


def test_run_step_lines_show_the_kernel_chosen_and_the_accuracy(tmp_path, capsys):
    (tmp_path / "job.toml").write_text(
        """
[job]
workdir = "work"

[[step]]
command = "make-data"
setting = "normal_noise"
n = 600
p = 5
k = 3
seed = 0
out = "train.zarr"

[[step]]
command = "fit"
method = "encoder"
data = "train.zarr"
model_out = "model"
set = { kernels = ["linear", "euclidean"] }

[[step]]
command = "evaluate"
model = "model"
data = "train.zarr"
"""
    )
    code = cli.main(["run", str(tmp_path / "job.toml")])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    fit = next(i for i, line in enumerate(lines) if line.startswith("  step 2 (fit)"))
    assert lines[fit + 1].startswith("      kernel chosen: ")
    assert lines[fit + 1].split(": ")[1].split(" ")[0] in ("linear", "euclidean")
    evaluate = next(i for i, line in enumerate(lines) if line.startswith("  step 3 (evaluate)"))
    assert lines[evaluate + 1].startswith("      accuracy ")
    assert " on 600 labeled rows (balanced " in lines[evaluate + 1]
