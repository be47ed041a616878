"""Every script under examples/ runs and checks its own results."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script):
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
