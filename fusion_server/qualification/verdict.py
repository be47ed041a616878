"""A device's verdict: the vector widths it qualified at, what failed and how; kept on disk.

The verdict depends on the driver, the device, the host CPU (a CPU driver compiles for
it) and the code the library generates, so its cache key holds all of them: platform,
device and driver versions, the CPU's model and flags, and a digest of the library's
sources. It is measured once per machine and driver, and again after an upgrade.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from ..runtime.device import DeviceInfo
from ..runtime.drivers import cache_root
from ..runtime.widths import ELEMENT_SIZES, VectorWidths

FORMAT = 1  # bump when the verdict's fields change


UNKNOWN_CPU = "unknown target CPU"  # PoCL's build log where its LLVM cannot name the CPU


@dataclass
class Failure:
    """One canary that failed: in which job (element size and width), and how."""

    job: str  # "4-byte x 16", or "common" (the families without a vector width)
    canary: str
    how: str  # crash, hang, build, wrong, error
    detail: str

    def __str__(self) -> str:
        return f"{self.job}: {self.canary} {self.how}: {self.detail}"


@dataclass
class Verdict:
    """What qualification found for one device."""

    device: str  # platform / name
    driver: str  # the driver's version strings
    widths: dict[int, int]  # element size -> qualified width (1: scalar code)
    preferred: dict[int, int]  # element size -> the width the device would get unqualified
    failures: list[Failure] = field(default_factory=list)
    common_ok: bool = True  # the families without a vector width (sort, gathers, ...) passed
    scalar_ok: bool = True  # no element size failed even as scalar code
    qualified: bool = True  # False: not run (a simulator, or qualification turned off)
    note: str = ""
    seconds: float = 0.0
    children: int = 0  # child processes started
    measured: str = ""  # when (UTC)

    @property
    def vector_widths(self) -> VectorWidths:
        return VectorWidths.from_dict(self.widths)

    @property
    def usable(self) -> bool:
        """Scalar code of every family gave right values (a device may still be used
        when not, but never by default)."""
        return self.common_ok and self.scalar_ok

    def score(self) -> tuple:
        """How good the verdict is for ranking drivers: usable first, then wider."""
        return (self.usable, sum(self.widths.get(s, 1).bit_length() for s in ELEMENT_SIZES))

    def to_json(self) -> str:
        data = asdict(self)
        data["format"] = FORMAT
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Verdict:
        data = json.loads(text)
        if data.pop("format", None) != FORMAT:
            raise ValueError("verdict of another format")
        data["widths"] = {int(k): int(v) for k, v in data["widths"].items()}
        data["preferred"] = {int(k): int(v) for k, v in data["preferred"].items()}
        data["failures"] = [Failure(**f) for f in data["failures"]]
        return cls(**data)

    def remedy(self) -> str:
        """What to do about an unusable verdict, where its failures say ("" where they do not)."""
        if any(UNKNOWN_CPU in f.detail for f in self.failures):
            return ("The driver's LLVM does not know this CPU and builds no kernel: Intel's CPU runtime (pip install "
                    "intel-opencl-rt intel-cmplr-lib-rt; the pocl extra brings it on Linux x86-64) or a newer PoCL "
                    "runs here, and is chosen once installed.")
        return ""

    def lines(self) -> list[str]:
        """The verdict as `info` prints it."""
        widths = VectorWidths.from_dict(self.widths)
        if not self.qualified:
            return [f"not qualified ({self.note}); widths {widths}"]
        out = [f"qualified widths: {widths}"
               + ("" if self.widths == self.preferred else
                  f" (unqualified: {VectorWidths.from_dict(self.preferred)})")]
        if not self.usable:
            out.append("NOT USABLE: scalar code failed canaries; never chosen by default")
            if self.remedy():
                out.append(self.remedy())
        out += [f"  failed {f}" for f in self.failures]
        out.append(f"measured {self.measured} in {self.seconds:.1f} s ({self.children} child processes)")
        return out


def driver_of(info: DeviceInfo) -> str:
    dev = info.device
    parts = []
    for attr in ("version", "driver_version"):
        try:
            parts.append(str(getattr(dev, attr)).strip())
        except Exception:  # noqa: BLE001 (an attribute a driver does not report)
            parts.append("?")
    try:
        parts.append(dev.platform.version.strip())
    except Exception:  # noqa: BLE001
        parts.append("?")
    return " | ".join(parts)


@lru_cache(maxsize=1)
def cpu_signature() -> str:
    """The host CPU's model and feature flags: what a CPU driver compiles for."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                found.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = found.get("model name") or platform.processor() or platform.machine()
    return f"{model} [{found.get('flags') or found.get('Features', '')}]"


@lru_cache(maxsize=1)
def sources_digest() -> str:
    """A digest of the library's code: new code is qualified anew."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_key(info: DeviceInfo) -> str:
    # (not the device's index: identical devices of one driver share a verdict)
    text = "\n".join([str(FORMAT), info.platform, info.name, driver_of(info), cpu_signature(),
                      sources_digest()])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cache_dir() -> Path:
    """Where verdicts are kept: FUSION_CACHE_DIR, else the user's cache directory."""
    return cache_root() / "qualification"


def load(info: DeviceInfo, directory: Path | None = None) -> Verdict | None:
    path = (directory or cache_dir()) / f"{cache_key(info)}.json"
    try:
        return Verdict.from_json(path.read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def store(info: DeviceInfo, verdict: Verdict, directory: Path | None = None) -> Path | None:
    """Write the verdict atomically (another process may qualify the same device at once)."""
    directory = directory or cache_dir()
    path = directory / f"{cache_key(info)}.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(verdict.to_json())
        os.replace(tmp, path)
    except OSError:
        return None  # a read-only home: the verdict holds for this process only
    return path


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
