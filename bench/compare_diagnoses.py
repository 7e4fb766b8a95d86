"""Two ``diagnose --json`` documents equal field by field: numbers to a relative tolerance.

    .venv/bin/python -m bench.compare_diagnoses A.json B.json [--rel 1e-9] [--abs 1e-12]

Every numeric field of A must equal B's within ``--rel`` relative (or ``--abs`` absolute, for
values near zero); every other field (causes, their order, locations, ranks, texts, keys) must be
identical. Texts are compared as they are, so a formatted number inside a text must print the same.
Prints each difference with its path and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any


def differences(a: Any, b: Any, rel: float, abs_: float, path: str = "$") -> list[str]:
    """Paths where ``a`` and ``b`` differ beyond the tolerance (numbers) or at all (the rest)."""
    num = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return [] if a is b else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, num) and isinstance(b, num):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return []
        if math.isinf(a) or math.isinf(b):
            return [f"{path}: {a!r} != {b!r}"]
        if abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} {a!r} != {type(b).__name__} {b!r}"]
    if isinstance(a, dict):
        if list(a) != list(b):
            return [f"{path}: keys {list(a)} != {list(b)}"]
        return [d for k in a for d in differences(a[k], b[k], rel, abs_, f"{path}.{k}")]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in differences(x, y, rel, abs_, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rel", type=float, default=1e-9)
    ap.add_argument("--abs", dest="abs_", type=float, default=1e-12)
    args = ap.parse_args(argv)
    with open(args.a) as fa, open(args.b) as fb:
        diffs = differences(json.load(fa), json.load(fb), args.rel, args.abs_)
    for d in diffs[:50]:
        print(d)
    if diffs:
        print(f"{len(diffs)} differences", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
