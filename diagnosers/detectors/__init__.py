"""Cause detectors: one small module per cause, all with the same shape (see ``registry``)."""

from diagnosers.detectors.base import CauseMatch, Probe, TraceStats
from diagnosers.detectors.registry import all_detectors, detect_all
from diagnosers.detectors.stats import compute_stats

__all__ = ["CauseMatch", "Probe", "TraceStats", "all_detectors", "compute_stats", "detect_all"]
