"""Progress on stderr for long CLI work: a bar on a terminal, nothing when stderr is piped.

The callbacks are the ones MCP relays as progress notifications (``progress(fraction, message)``,
fractions in [0, 1]). Nothing is drawn during the first ``delay`` seconds, so quick runs stay
silent; the bar is erased when the work ends, so stdout (the report) is never interleaved.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

BAR_WIDTH = 28


class Bar:
    """A ``progress(fraction, message)`` callable that draws one self-overwriting stderr line."""

    def __init__(self, stream: TextIO | None = None, *, delay: float = 1.0, label: str = ""):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.delay = delay
        self.label = label
        self.start = time.monotonic()
        self.drawn = False
        self.last = 0.0

    def __call__(self, fraction: float, message: str = "") -> None:
        if not self.enabled or time.monotonic() - self.start < self.delay:
            return
        fraction = min(1.0, max(self.last, fraction))  # never runs backwards
        self.last = fraction
        done = round(fraction * BAR_WIDTH)
        line = f"{self.label}[{'#' * done}{'.' * (BAR_WIDTH - done)}] {fraction * 100:3.0f}% {message}"
        self.stream.write("\r" + line[:100].ljust(100))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """Erase the bar (only if one was drawn)."""
        if self.drawn:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
            self.drawn = False


@contextmanager
def progress_bar(label: str = "", *, stream: TextIO | None = None, delay: float = 1.0) -> Iterator[Bar]:
    bar = Bar(stream, delay=delay, label=label)
    try:
        yield bar
    finally:
        bar.close()
