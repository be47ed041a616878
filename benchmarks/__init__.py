"""Benchmarks of fusion-server against unfused and hand-written baselines.

They run with device profiling on (FUSION_PROFILE=1, unless set otherwise), so the
element-wise chain can report kernel times measured by the device next to wall times.
"""

import os

os.environ.setdefault("FUSION_PROFILE", "1")
