"""Interpreter exit is clean with work queued, threads running and tensors alive."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import threading, numpy as np, clients
keep = [clients.asarray(np.ones(1000, np.float32)) * float(i) for i in range(20)]
def worker():
    t = clients.asarray(np.arange(100, dtype=np.float32))
    for _ in range(50):
        t = clients.exp(t * 0.01)
threads = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
for th in threads: th.start()
pending = clients.sin(keep[3]) + 1.0   # queued, never read
print("exiting")
"""


def test_exit_with_pending_work_is_clean():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "exiting" in done.stdout
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
