"""Benchmarks of fusion-server against unfused and hand-written baselines."""
