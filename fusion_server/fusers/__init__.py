"""Fusers: builders that claim runs of queued ops and turn them into executable plans."""

from .base import Fuser, Plan
from .elementwise import ElementwiseFuser
from .pattern import PatternFuser

__all__ = ["ElementwiseFuser", "Fuser", "PatternFuser", "Plan"]
