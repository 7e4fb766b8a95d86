"""Bundled sample traces: the what-if study artifact's three job traces (Apache-2.0, see
``artifact/LICENSE`` and ``artifact/README.md``) and the artifact's expected outputs for ST."""

from __future__ import annotations

from pathlib import Path

ARTIFACT_DIR = Path(__file__).resolve().parent / "artifact"
SAMPLE_NAMES: tuple[str, ...] = ("ST", "AR", "SE")


def artifact_trace(name: str) -> Path:
    """Path of ``trace-<name>.parquet`` (its ``meta-<name>.yaml`` sits beside it)."""
    if name not in SAMPLE_NAMES:
        raise KeyError(f"no bundled sample {name!r}; known: {', '.join(SAMPLE_NAMES)}")
    return ARTIFACT_DIR / f"trace-{name}.parquet"
