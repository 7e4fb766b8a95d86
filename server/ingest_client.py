"""Live ingestion client: stream each rank's profiling window to a Straggler Lens server.

Import this module inside a training job. Its only dependency is ``httpx``: it imports nothing
else of the project (nor ``numpy``, ``torch`` ...), so a training image needs ``pip install
httpx`` plus this one file, not the server's dependencies.

Two ready handlers:

- :meth:`LensReporter.on_trace_ready` for ``torch.profiler.profile(on_trace_ready=...)``: it
  exports the cycle's Chrome trace as gzip into ``out_dir`` and uploads it;
- :meth:`LensReporter.send_records` for NDTimeline-style records (dicts or objects with
  ``to_dict()`` carrying ``metric``, ``rank``, ``step``, ``start_ts``, ``duration`` ...): written
  as gzip JSON Lines, then uploaded.

Each upload is ``PUT {url}/api/jobs/{job}/windows/{window}/ranks/{rank}?world_size=N`` with the
gzip body. It runs on a background thread: the training loop pays for writing the local file and
nothing else. Failures are retried with exponential backoff and jitter, within a bounded total
time per upload; a final failure is a logged warning (logger ``straggler_lens.client``) and the
file stays on local disk. No method of the reporter raises into the training loop.

The window id must be the same on every rank of a profiling session. By default it is
``{run}-s{step}`` where ``step`` is the profiler's step counter (equal on all ranks of a
synchronous job) and ``run`` the ``run`` option, else ``$STRAGGLER_LENS_RUN``, else
``$TORCHELASTIC_RUN_ID``, else nothing (then ``s{step}``).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import queue
import random
import re
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

log = logging.getLogger("straggler_lens.client")

TOKEN_ENV = "STRAGGLER_LENS_TOKEN"
URL_ENV = "STRAGGLER_LENS_URL"
RUN_ENV = "STRAGGLER_LENS_RUN"
# Path segments the server accepts for job and window ids (the same rule, checked server-side).
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Answers worth another try: the server is busy, restarting or timed out on us.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class UploadOutcome:
    """What became of one upload: ``ok``, the HTTP status (None without an answer), the tries
    made, the local file, and the server's answer or the last error."""

    ok: bool
    status: int | None
    tries: int
    path: Path
    detail: str


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    try:
        return int(raw) if raw not in (None, "") else None
    except ValueError:
        return None


def _dist_info() -> tuple[int | None, int | None]:
    """(rank, world size) from an initialised ``torch.distributed`` already imported by the job."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-initialised group: fall back to the environment
        pass
    return None, None


class LensReporter:
    """Uploads one rank's profiling windows of a job to the server, in the background.

    ``url``: the server (else ``$STRAGGLER_LENS_URL``); ``job``: the job name (``[A-Za-z0-9._-]``,
    at most 128 characters); ``rank`` / ``world_size``: this process's global rank and the job's
    world size (else ``torch.distributed`` when initialised, else ``$RANK`` / ``$WORLD_SIZE``);
    ``token``: the server's bearer token (else ``$STRAGGLER_LENS_TOKEN``); ``out_dir``: where the
    local copies go (kept after the upload); ``attempt_timeout`` bounds one HTTP try,
    ``total_timeout`` all tries of one upload, ``max_tries`` their number; ``backoff`` is the
    first retry delay (doubled each time, with ±50 % jitter, at most ``max_backoff``).
    """

    def __init__(
        self,
        url: str | None = None,
        job: str = "",
        *,
        rank: int | None = None,
        world_size: int | None = None,
        token: str | None = None,
        run: str | None = None,
        out_dir: str | Path | None = None,
        fmt: str | None = None,
        attempt_timeout: float = 30.0,
        total_timeout: float = 120.0,
        max_tries: int = 6,
        backoff: float = 0.5,
        max_backoff: float = 15.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.url = (url or os.environ.get(URL_ENV) or "").rstrip("/")
        self.job = job
        self.enabled = bool(self.url) and bool(ID_RE.match(job))
        if not self.url:
            log.warning("straggler-lens reporting is off: no server URL (option or $%s)", URL_ENV)
        elif not ID_RE.match(job):
            log.warning("straggler-lens reporting is off: job name %r is not [A-Za-z0-9._-]{1,128}", job)
        d_rank, d_world = _dist_info()
        self._rank = rank if rank is not None else d_rank if d_rank is not None else _env_int("RANK")
        if world_size is None:
            world_size = d_world if d_world is not None else _env_int("WORLD_SIZE")
        self._world = world_size
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        raw_run = run if run is not None else os.environ.get(RUN_ENV) or os.environ.get("TORCHELASTIC_RUN_ID")
        self.run = raw_run if raw_run and ID_RE.match(raw_run) else None
        self.out_dir = Path(out_dir) if out_dir is not None else Path("straggler-lens-traces")
        self.fmt = fmt
        self.attempt_timeout = attempt_timeout
        self.total_timeout = total_timeout
        self.max_tries = max(1, max_tries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._transport = transport
        self._queue: queue.Queue[tuple[Path, str, str] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.outcomes: list[UploadOutcome] = []
        self._closed = False

    # -- identity ------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's rank, looked up again if ``torch.distributed`` was initialised later."""
        if self._rank is None:
            self._rank = _dist_info()[0]
        return self._rank if self._rank is not None else 0

    @property
    def world_size(self) -> int | None:
        if self._world is None:
            self._world = _dist_info()[1]
        return self._world

    def window_id(self, step: int | None) -> str:
        """The window id of a profiling cycle that ended at profiler step ``step``."""
        tail = f"s{step}" if step is not None else f"t{int(time.time())}"
        return f"{self.run}-{tail}" if self.run else tail

    # -- handlers ------------------------------------------------------------------------------

    def on_trace_ready(self, prof: Any) -> None:
        """``torch.profiler`` handler: export this cycle's trace (gzip) and queue its upload.

        Never raises: an export failure is a warning and the training step goes on.
        """
        try:
            window = self.window_id(getattr(prof, "step_num", None))
            path = self._local_path(window, f"kineto_rank{self.rank}.json.gz")
            prof.export_chrome_trace(str(path))
            self.submit(path, window)
        except Exception as exc:
            log.warning("straggler-lens: could not export the profiler trace: %s", exc)

    def send_records(
        self, records: Iterable[Any], window: str | None = None, step: int | None = None
    ) -> None:
        """NDTimeline handler: write ``records`` (dicts or objects with ``to_dict()``) as gzip JSON
        Lines and queue the upload under ``window`` (else :meth:`window_id` of ``step``).

        Never raises: a record that cannot be serialised makes the whole batch a warning.
        """
        try:
            window = window or self.window_id(step)
            path = self._local_path(window, f"ndtimeline_rank{self.rank}.jsonl.gz")
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                for rec in records:
                    row = rec.to_dict() if hasattr(rec, "to_dict") else dict(rec)
                    fh.write(json.dumps(row, separators=(",", ":")) + "\n")
            self.submit(path, window, fmt=self.fmt or "ndtimeline")
        except Exception as exc:
            log.warning("straggler-lens: could not write the NDTimeline records: %s", exc)

    __call__ = on_trace_ready

    # -- uploads -------------------------------------------------------------------------------

    def submit(self, path: Path, window: str, fmt: str | None = None) -> None:
        """Queue the upload of a local (gzip) trace file for ``window``; returns at once."""
        if not self.enabled or self._closed:
            return
        if not ID_RE.match(window):
            log.warning("straggler-lens: window id %r is not [A-Za-z0-9._-]{1,128}; not sent", window)
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="straggler-lens-upload", daemon=True)
                self._thread.start()
        self._queue.put((Path(path), window, fmt or self.fmt or ""))

    def close(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (default: ``total_timeout``) for queued uploads; True when
        all finished. Uploads still running afterwards continue on the daemon thread."""
        self._closed = True
        thread = self._thread
        if thread is None:
            return True
        self._queue.put(None)
        thread.join(self.total_timeout if timeout is None else timeout)
        return not thread.is_alive()

    def _local_path(self, window: str, name: str) -> Path:
        folder = self.out_dir / self.job / window
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def _run(self) -> None:
        with httpx.Client(timeout=self.attempt_timeout, transport=self._transport) as client:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                path, window, fmt = item
                try:
                    outcome = self._upload(client, path, window, fmt)
                except Exception as exc:  # never let the thread die: later windows still go out
                    outcome = UploadOutcome(False, None, 0, path, f"unexpected error: {exc!r}")
                self.outcomes.append(outcome)
                if not outcome.ok:
                    log.warning(
                        "straggler-lens: upload of %s failed after %d tries (%s); the trace stays there",
                        path,
                        outcome.tries,
                        outcome.detail,
                    )

    def _endpoint(self, window: str) -> str:
        job, win = quote(self.job, safe=""), quote(window, safe="")
        return f"{self.url}/api/jobs/{job}/windows/{win}/ranks/{self.rank}"

    def _delay(self, tries: int) -> float:
        """Exponential backoff with ±50 % jitter, so ranks that failed together retry apart."""
        base = min(self.max_backoff, self.backoff * (2 ** (tries - 1)))
        return base * random.uniform(0.5, 1.5)

    def _upload(self, client: httpx.Client, path: Path, window: str, fmt: str) -> UploadOutcome:
        body = path.read_bytes()
        params: dict[str, str] = {"filename": path.name}
        if self.world_size:
            params["world_size"] = str(self.world_size)
        if fmt:
            params["format"] = fmt
        headers = {"Content-Type": "application/gzip"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        deadline = time.monotonic() + self.total_timeout
        status: int | None = None
        detail = ""
        for tries in range(1, self.max_tries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                gave_up = f"gave up after {self.total_timeout}s: {detail}"
                return UploadOutcome(False, status, tries - 1, path, gave_up)
            try:
                resp = client.put(
                    self._endpoint(window),
                    content=body,
                    params=params,
                    headers=headers,
                    timeout=min(self.attempt_timeout, left),
                )
                status, detail = resp.status_code, resp.text[:300]
                if resp.status_code < 300:
                    return UploadOutcome(True, status, tries, path, detail)
                if resp.status_code not in RETRY_STATUSES:
                    return UploadOutcome(False, status, tries, path, f"HTTP {status}: {detail}")
            except httpx.HTTPError as exc:
                status, detail = None, f"{type(exc).__name__}: {exc}"
            pause = min(self._delay(tries), max(0.0, deadline - time.monotonic()))
            if tries < self.max_tries and pause > 0:
                time.sleep(pause)
        return UploadOutcome(False, status, self.max_tries, path, detail)
