"""The ``straggler-lens`` command line.

Each subcommand lives in its own module under ``server.cli.commands`` and exposes
``register(subparsers)``. Those modules import only ``argparse`` at top level and import the
engine, the incident library or the web stack inside their handlers, so ``analyze`` does not pay
for the server's imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, in the order ``--help`` lists them. A module that does not exist yet is
# skipped, so the CLI works while features land one by one.
COMMAND_MODULES: tuple[str, ...] = (
    "analyze",
    "diagnose",
    "fleet",
    "generate",
    "incidents",
    "serve",
    "timeline",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="straggler-lens",
        description="Find and explain stragglers in distributed LLM training traces.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"server.cli.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"server.cli.commands.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the known input errors get one clean line instead of a traceback
        from diagnosers.model import TraceError

        if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
            # an output path that is a folder, exists already, or may not be written
            print(f"straggler-lens: error: {exc.strerror}: {exc.filename}", file=sys.stderr)
            return 2
        if isinstance(exc, TraceError | FileNotFoundError | ValueError | LookupError):
            print(f"straggler-lens: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
