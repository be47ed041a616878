"""A picture of a benchmark run: the element-wise chain's variants and the targets."""

from __future__ import annotations

from pathlib import Path


def plot(results: dict, path: Path) -> Path | None:
    """Write a PNG of `results` (from benchmarks.run) to `path`; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    chain = results.get("chain", {})
    variants = chain.get("variants", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(variants)
    times = [variants[n]["median_s"] * 1e3 for n in names]
    left.barh(names, times, color=["tab:green" if n == "fused" else "tab:gray" for n in names])
    left.set_xscale("log")
    left.set_xlabel("median ms (log scale)")
    left.set_title(f"element-wise chain, {chain.get('elements', '?')} float32")
    labels, ratio = [], []
    for row in results.get("summary", []):
        target, value = row.get("target"), row.get("value")
        if not target or not isinstance(value, (int, float)):
            continue
        op, number = target.split()
        goal = float(number)
        if goal == 0:
            continue
        labels.append(row["measure"])
        ratio.append(goal / max(value, 1e-12) if op == "<=" else value / goal if op == ">=" else
                     (1.0 if value == goal else 0.0))
    right.barh(labels, ratio, color=["tab:green" if v >= 1 else "tab:red" for v in ratio])
    right.axvline(1.0, color="black", linewidth=1)
    right.set_xlabel("measured / target (>= 1: met)")
    right.set_title("targets")
    right.tick_params(axis="y", labelsize=7)
    fig.suptitle(results.get("environment", {}).get("device_description", ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
