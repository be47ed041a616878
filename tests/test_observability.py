"""stats(), inspect(), FUSION_DUMP_DIR, the debug log, and the layering rule."""

from __future__ import annotations

import logging
import pathlib
import re
import subprocess
import sys

import numpy as np

import clients
from tests.conftest import rand, run_python, server_settings


def test_stats_has_the_contract_keys():
    s = clients.stats()
    for key in ("ops_registered", "kernels_launched", "compiles", "buffers_live", "inplace_reuses", "plan_hits"):
        assert isinstance(s[key], int), key


def test_stats_count_ops_and_launches():
    x = clients.asarray(rand(10))
    before = clients.stats()
    (clients.exp(x) + 1.0).numpy()
    after = clients.stats()
    assert after["ops_registered"] - before["ops_registered"] == 2
    assert after["kernels_launched"] - before["kernels_launched"] == 1
    assert after["reads"] - before["reads"] == 1


def test_inspect_flushes_on_exit_and_records_op_names():
    x = clients.asarray(rand(10))
    with clients.inspect() as rec:
        y = clients.cos(x) * 2.0
    assert [k.ops for k in rec.kernels] == [["cos", "multiply"]]
    np.testing.assert_allclose(y.numpy(), np.cos(rand(10)) * 2, rtol=1e-6)


def test_block_boundaries_are_logged_with_a_reason(caplog):
    x = clients.asarray(rand((2, 3)))
    with caplog.at_level(logging.DEBUG, logger="fusion_server"):
        s = clients.exp(x[0]) + 1.0  # shape (3,)
        (x * s).numpy()  # shape (2, 3): closes the first block
    text = caplog.text
    assert "block of 2 ops (exp, add) closed" in text
    assert "differs in size from the block's" in text


def test_dump_dir_receives_every_generated_kernel(tmp_path):
    code = (
        "import numpy as np, clients\n"
        "x = clients.asarray(np.arange(8, dtype=np.float32))\n"
        "(clients.log1p(x) * 2.5).numpy()\n"
    )
    done = run_python(code, FUSION_DUMP_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    files = list(tmp_path.glob("*.cl"))
    assert len(files) == 1
    source = files[0].read_text()
    assert "log1p" in source and "__kernel void" in source


def test_repr_does_not_force_a_read():
    x = clients.asarray(rand(5))
    y = x + 1.0
    before = clients.stats()["kernels_launched"]
    text = repr(y)
    assert "pending" in text and "shape=(5,)" in text and "float32" in text
    assert clients.stats()["kernels_launched"] == before
    y.numpy()
    assert "ready" in repr(y)


def test_set_mode_switches_between_eager_and_lazy():
    x = clients.asarray(rand(5))
    with server_settings(mode="eager"):
        with clients.inspect() as rec:
            (x + 1.0 + 2.0).numpy()
    assert len(rec.kernels) == 2
    with clients.inspect() as rec:
        (x + 1.0 + 2.0).numpy()
    assert len(rec.kernels) == 1


def test_fusion_server_never_imports_clients():
    root = pathlib.Path(__file__).resolve().parents[1] / "fusion_server"
    pattern = re.compile(r"^\s*(from|import)\s+clients\b", re.M)
    offenders = [
        str(p) for p in root.rglob("*.py") if p.name != "__main__.py" and pattern.search(p.read_text())
    ]
    assert not offenders


def test_demo_runs_and_checks_against_numpy(capsys):
    from clients import cli

    assert cli.main(["demo", "--elements", "65536", "--iters", "2"]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out and "kernels launched" in out
    # The timed iterations repeat the warm-up's work: their runs of ops are replayed from
    # the run cache, and what goes the usual way has its blocks from stored plans. (Not
    # every one: a thread whose batch grew past 64 ops while another held the lock takes
    # the usual path from another op on, a sequence of blocks the warm-up may not have met.)
    line = next(ln for ln in out.splitlines() if ln.startswith("run cache"))
    assert int(line.split()[2]) > 0
    line = next(ln for ln in out.splitlines() if ln.startswith("plan store"))
    replayed, total = (int(w) for w in line.split()[2:5:2])
    assert total - replayed <= 2
    assert clients.stats()["mode"] == "lazy"  # the eager comparison switched back


def test_info_lists_devices(capsys):
    from clients import cli

    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "max_bindings" in out and "*" in out
    assert cli.main(["bogus"]) == 2


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "fusion_server", "info"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "default device" in done.stdout


def test_explain_says_which_fuser_took_each_block_and_why_it_closed():
    x = clients.asarray(rand((4, 8)))
    with clients.inspect() as rec:
        s = clients.sum(clients.exp(x) * 2.0, axis=-1) + 1.0
        t = x + 1.0
        s.numpy()
        t.numpy()
    text = rec.explain()
    assert "kernel 0: reduce" in text and "fuser reduce" in text and "exp, multiply, sum, add" in text
    assert "kernel 1: elementwise" in text and "closed: tensor" in text
    assert rec.kernels[0].why.startswith("fuser reduce (scores: elementwise 2, reduce 4")


def test_dump_dir_files_match_the_kernel_names_inspect_reports(tmp_path):
    code = (
        "import numpy as np, clients\n"
        "x = clients.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))\n"
        "with clients.inspect() as rec:\n"
        "    (clients.sum(clients.sqrt(x + 0.5), axis=0) * 2.0).numpy()\n"
        "    (x @ x.T).numpy()\n"
        "print(' '.join(k.name for k in rec.kernels))\n"
    )
    done = run_python(code, FUSION_DUMP_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    names = done.stdout.split()
    assert len(names) == 2
    for name in names:
        assert (tmp_path / f"{name}.cl").exists()


def test_bench_command_reaches_the_benchmark_suite(capsys):
    import pytest

    from clients import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["bench", "--help"])
    assert done.value.code == 0
    assert "--size" in capsys.readouterr().out


def test_info_names_the_kernel_cache_of_the_default_device(capsys):
    from clients import cli
    from fusion_server.runtime.drivers import kernel_cache_of

    cli.main(["info"])
    out = capsys.readouterr().out
    device = clients.default_device().info.device
    where = kernel_cache_of(device)
    assert where
    default_block = out.split("\n* ")[1].split("\n  [")[0] if "\n* " in out else out.split("* ", 1)[1]
    assert f"kernel cache          {where}" in default_block
