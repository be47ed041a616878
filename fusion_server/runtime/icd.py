"""Showing the OpenCL loader the drivers that pip installed into this environment.

The loader finds drivers through `.icd` files in one vendor directory (/etc/OpenCL/vendors,
or the one `OCL_ICD_VENDORS` names) and, for pyopencl's wheels, next to pyopencl itself.
A driver installed by pip, such as Intel's CPU runtime (`intel-opencl-rt`), puts its
library under the environment's `lib/` and an `.icd` file under `etc/OpenCL/vendors/` that
names the library at the path of the machine where the package was built, so the loader
never sees it. PoCL's LLVM 14 cannot build a kernel on a CPU it does not know (an AMD Zen 5
reads as "generic"), and such a machine needs that second CPU driver.

Before the first platform query, `expose_pip_drivers` writes a vendor directory holding the
system's `.icd` files and one for each driver found in the environment, lets the loader
read it, and takes it away again: the loader reads vendor files once per process. Nothing
is done when the user set `OCL_ICD_VENDORS` (their choice stands), when the driver is
already registered with the system, or when `FUSION_PIP_DRIVERS=0`.
"""

from __future__ import annotations

import logging
import os
import site
import sys
import tempfile
import threading
from pathlib import Path

import pyopencl as cl

log = logging.getLogger("fusion_server")

SYSTEM_VENDORS = "/etc/OpenCL/vendors"

_lock = threading.Lock()
_exposed: list[str] | None = None


def _prefixes() -> list[Path]:
    """Where pip puts data files: the environment, and the user's base for `--user` installs."""
    found: list[Path] = []
    for prefix in (sys.prefix, site.getuserbase()):
        if prefix and Path(prefix) not in found:
            found.append(Path(prefix))
    return found


def _icd_entries(directory: Path) -> dict[str, str]:
    """File name -> the library each `.icd` file of `directory` names."""
    try:
        names = sorted(p for p in directory.iterdir() if p.suffix == ".icd" and p.is_file())
    except OSError:
        return {}
    out: dict[str, str] = {}
    for path in names:
        try:
            text = path.read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            out[path.name] = text
    return out


def pip_driver_libraries(prefixes: list[Path] | None = None) -> list[Path]:
    """Driver libraries that pip installed and whose `.icd` file points elsewhere: each
    `.icd` under `<prefix>/etc/OpenCL/vendors` whose library is found under `<prefix>/lib`."""
    found: list[Path] = []
    for prefix in _prefixes() if prefixes is None else prefixes:
        for library in _icd_entries(prefix / "etc" / "OpenCL" / "vendors").values():
            local = prefix / "lib" / Path(library).name
            if local.is_file() and local not in found:
                found.append(local)
    return found


def vendor_files(system: dict[str, str], libraries: list[Path]) -> dict[str, str]:
    """The vendor directory to show the loader: the system's files, and one per library the
    system does not already register (by library file name)."""
    registered = {Path(text).name for text in system.values()}
    files = dict(system)
    for library in libraries:
        if library.name not in registered:
            files[f"fusion-pip-{library.stem}.icd"] = str(library)
    return files


def expose_pip_drivers() -> list[str]:
    """Make pip-installed OpenCL drivers visible to this process's loader (once, before the
    first platform query); the libraries added, an empty list when none was needed."""
    global _exposed
    with _lock:
        if _exposed is not None:
            return _exposed
        if os.environ.get("FUSION_PIP_DRIVERS", "1").strip() == "0" or os.environ.get("OCL_ICD_VENDORS"):
            _exposed = []
            return _exposed
        system = _icd_entries(Path(os.environ.get("OPENCL_VENDOR_PATH") or SYSTEM_VENDORS))
        files = vendor_files(system, pip_driver_libraries())
        added = [text for name, text in files.items() if name not in system]
        if not added:
            _exposed = []
            return _exposed
        # (An interrupt from here on leaves `_exposed` unset: the next query tries again.)
        with tempfile.TemporaryDirectory(prefix="fusion-opencl-vendors-") as directory:
            for name, text in files.items():
                Path(directory, name).write_text(text + "\n")
            os.environ["OCL_ICD_VENDORS"] = directory
            try:
                cl.get_platforms()  # the loader reads the vendor directory here, once
            except cl.Error:
                pass
            finally:
                del os.environ["OCL_ICD_VENDORS"]
        _exposed = added
        log.info("OpenCL drivers installed by pip, shown to the loader: %s", ", ".join(added))
        return _exposed
