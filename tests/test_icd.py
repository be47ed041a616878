"""Drivers installed by pip are shown to the OpenCL loader (runtime/icd.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusion_server.runtime import icd


def _prefix(tmp_path: Path, icds: dict[str, str], libs: list[str]) -> Path:
    vendors = tmp_path / "etc" / "OpenCL" / "vendors"
    vendors.mkdir(parents=True)
    (tmp_path / "lib").mkdir()
    for name, text in icds.items():
        (vendors / name).write_text(text + "\n")
    for lib in libs:
        (tmp_path / "lib" / lib).write_bytes(b"\x7fELF")
    return tmp_path


def test_a_pip_icd_file_names_its_library_where_pip_put_it(tmp_path):
    prefix = _prefix(tmp_path, {"intel-cpu.icd": "/opt/build-machine/lib/libintelocl.so",
                                "intel-fpga_emu.icd": "/opt/build-machine/lib/libintelocl_emu.so",
                                "empty.icd": "", "notes.txt": "/x/libnot.so"},
                     ["libintelocl.so", "libnot.so"])
    # The emulator's library was not installed, an empty file names nothing, and only .icd files count.
    assert icd.pip_driver_libraries([prefix]) == [prefix / "lib" / "libintelocl.so"]
    assert icd.pip_driver_libraries([tmp_path / "nowhere"]) == []


def test_the_vendor_directory_keeps_the_systems_drivers_and_adds_each_library_once():
    system = {"nvidia.icd": "libnvidia-opencl.so.1"}
    files = icd.vendor_files(system, [Path("/env/lib/libintelocl.so")])
    assert files == {"nvidia.icd": "libnvidia-opencl.so.1", "fusion-pip-libintelocl.icd": "/env/lib/libintelocl.so"}
    registered = {"intel.icd": "/usr/lib/x86_64-linux-gnu/libintelocl.so"}
    assert icd.vendor_files(registered, [Path("/env/lib/libintelocl.so")]) == registered


_PROBE = """
import json, os
import pyopencl as cl
from fusion_server.runtime import icd
added = icd.expose_pip_drivers()
again = icd.expose_pip_drivers()
try:
    platforms = [p.name for p in cl.get_platforms()]
except cl.Error:  # a vendor directory naming no driver that loads, and no wheel's own
    platforms = []
print(json.dumps({"added": added, "again": again, "env": os.environ.get("OCL_ICD_VENDORS"),
                  "platforms": platforms}))
"""


def _probe(**env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_VENDORS", "FUSION_PIP_DRIVERS")}
    full.update(env)
    done = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not icd.pip_driver_libraries(), reason="no OpenCL driver installed by pip in this environment")
def test_a_fresh_process_sees_the_pip_drivers_and_keeps_no_trace_of_the_directory():
    seen = _probe()
    assert seen["added"] == [str(p) for p in icd.pip_driver_libraries()] and seen["again"] == seen["added"]
    assert seen["env"] is None  # the loader has read it; the variable is gone again
    assert any("Intel" in name for name in seen["platforms"]), seen["platforms"]
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("fusion-opencl-vendors-*"))
    off = _probe(FUSION_PIP_DRIVERS="0")
    assert off["added"] == [] and not any("Intel" in name for name in off["platforms"])


def test_a_vendor_directory_the_user_chose_stands(tmp_path):
    (tmp_path / "none.icd").write_text("/nowhere/libmissing.so\n")
    seen = _probe(OCL_ICD_VENDORS=str(tmp_path))
    assert seen["added"] == [] and seen["env"] == str(tmp_path)
    assert not any("Intel" in name for name in seen["platforms"])


_INTERRUPTED = """
import json, os
import pyopencl as cl
from fusion_server.runtime import icd
real = cl.get_platforms
calls = []
def interrupted():
    calls.append(1)
    if len(calls) == 1:
        raise KeyboardInterrupt
    return real()
cl.get_platforms = interrupted
try:
    icd.expose_pip_drivers()
except KeyboardInterrupt:
    pass
env_after = os.environ.get("OCL_ICD_VENDORS")
added = icd.expose_pip_drivers()
print(json.dumps({"env_after": env_after, "added": added, "platforms": [p.name for p in real()]}))
"""


@pytest.mark.skipif(not icd.pip_driver_libraries(), reason="no OpenCL driver installed by pip in this environment")
def test_an_interrupt_while_showing_the_drivers_leaves_no_variable_and_the_next_query_tries_again():
    full = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_VENDORS", "FUSION_PIP_DRIVERS")}
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED], env=full, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["env_after"] is None and seen["added"]
    assert any("Intel" in name for name in seen["platforms"]), seen["platforms"]
