"""Vector widths per element size: how many elements one work-item handles at once.

A width is a register size: 16 floats and 8 doubles both fill a 512-bit register. A
driver may compile one element size right at a width and another wrong (the PoCL that
pip brings, on AMD Zen 4: 8 floats right, 8 longs wrong), so each element size has its
own width, and a kernel runs at the narrowest width among the element sizes it touches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

ELEMENT_SIZES = (1, 2, 4, 8)
WIDTHS = (1, 2, 4, 8, 16)  # the vector lengths OpenCL C has (3 aside)


class VectorWidths(NamedTuple):
    """The width of each element size (1, 2, 4 and 8 bytes); 1 means scalar code."""

    w1: int
    w2: int
    w4: int
    w8: int

    @classmethod
    def uniform(cls, width: int) -> VectorWidths:
        return cls(width, width, width, width)

    @classmethod
    def from_dict(cls, by_size: dict) -> VectorWidths:
        return cls(*(int(by_size[str(s)] if str(s) in by_size else by_size[s]) for s in ELEMENT_SIZES))

    def of_size(self, itemsize: int) -> int:
        """The width of elements of `itemsize` bytes (wider elements count as 8 bytes)."""
        if itemsize <= 1:
            return self.w1
        if itemsize == 2:
            return self.w2
        if itemsize <= 4:
            return self.w4
        return self.w8

    def for_dtypes(self, dtypes: Iterable[np.dtype]) -> int:
        """The width of a kernel over values of `dtypes`: the narrowest of their sizes (1
        with a complex dtype, whose OpenCL type is a vector already)."""
        width = max(self)
        for d in dtypes:
            if d.kind == "c":
                return 1
            w = self.of_size(d.itemsize)
            if w < width:
                width = w
        return width

    def as_dict(self) -> dict[int, int]:
        return dict(zip(ELEMENT_SIZES, self))

    def __str__(self) -> str:
        return ", ".join(f"{s}-byte {w}" for s, w in zip(ELEMENT_SIZES, self))
