"""The trace-reading arguments shared by every command that reads a trace (``analyze``, ``diagnose``).

``add_read_arguments(parser)`` adds ``PATH...``, ``--format``, ``--meta`` and the job keys
(``--dp --pp --tp --cp --vpp --gpus-per-host --layers-per-stage``); ``read_options(args)`` turns
them into ``diagnosers.readers.ReadOptions``. Sizes must be positive integers, so a typo such as
``--dp 0`` is refused by argparse with one line instead of reaching the job model. Only
``argparse`` is imported at module level (a CLI call must not pay for the engine's imports).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnosers.readers import ReadOptions


def positive_int(text: str) -> int:
    """An integer >= 1 (parallel sizes, GPUs per host)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def int_list(text: str) -> list[int]:
    """Comma-separated positive integers, e.g. layer counts per stage ``9,9,9,9``."""
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive layer counts, got {text!r}")
    return values


def add_read_arguments(p: argparse.ArgumentParser) -> None:
    """The trace paths, the format, the meta yaml and the job keys that override it."""
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files, directories or globs (+ meta yaml)")
    p.add_argument("--format", default=None, help="input format (default: detected from the files)")
    p.add_argument("--meta", default=None, metavar="META.yaml", help="job meta yaml (artifact keys)")
    p.add_argument("--dp", type=positive_int, default=None, help="data-parallel size")
    p.add_argument("--pp", type=positive_int, default=None, help="pipeline-parallel size")
    p.add_argument("--tp", type=positive_int, default=None, help="tensor-parallel size")
    p.add_argument("--cp", type=positive_int, default=None, help="context-parallel size")
    p.add_argument("--vpp", type=positive_int, default=None, help="model chunks per stage (interleaved 1F1B)")
    p.add_argument("--gpus-per-host", type=positive_int, default=None, help="GPUs per host (default 8)")
    p.add_argument(
        "--layers-per-stage",
        type=int_list,
        default=None,
        metavar="N,N,...",
        help="transformer layers on each PP stage (e.g. 9,9,9,9); the stage-repartition remedy uses it",
    )


def read_options(args: argparse.Namespace) -> ReadOptions:
    """``ReadOptions`` from the arguments ``add_read_arguments`` added."""
    from pathlib import Path

    from diagnosers.readers import ReadOptions

    return ReadOptions(
        format=args.format,
        meta_path=Path(args.meta) if args.meta else None,
        dp=args.dp,
        pp=args.pp,
        tp=args.tp,
        cp=args.cp,
        vpp=args.vpp,
        gpus_per_host=args.gpus_per_host,
        layers_per_stage=args.layers_per_stage,
    )
