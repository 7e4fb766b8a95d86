"""The monitoring loop: live windows in, background analysis, alerts out through the outbox.

``Monitor`` sits beside the ``Lens`` (same store, same data folder) and runs three loops in the
server's lifespan, each bounded by its poll interval:

1. **assembly**: windows still receiving after their grace deadline are assembled with the ranks
   that arrived (a window whose last rank arrives is assembled at once, in the upload's own
   transaction);
2. **analysis**: claims queued windows with a lease (renewed while it runs), stores the window's
   files as one trace (``Lens.ingest``), diagnoses it off the event loop, projects the diagnosis
   into the window's summary and, in the same transaction that marks the window done, raises the
   alerts the rules ask for;
3. **delivery**: claims due outbox rows with a lease, sends them (Slack Block Kit or the signed
   JSON webhook), logs every try and retries with exponential backoff and jitter.

A server killed at any point loses nothing: leases run out and another process (or the restarted
one) takes over. Deliveries are at least once; the alert id travels with every try so a receiver
can drop a repeat, and an HTTP try is bounded well inside the lease so two live replicas never
send the same row at the same time.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx

from server.core.alert_rules import AlertRules, Destination, firing
from server.core.chat_render import slack_message
from server.core.errors import ApiError
from server.core.history import trend, window_summary
from server.core.jobs_store import (
    AlertCandidate,
    Claim,
    JobStore,
    RankArrival,
    WindowConflict,
    backoff_delay,
    new_owner,
)
from server.core.signing import webhook_headers
from server.core.staging import StagedFile, UploadBudget, safe_filename, write_stream

log = logging.getLogger("straggler_lens.monitor")

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_RANK = 65535
WORLD_SIZE_RE = re.compile(rb'"world_size"\s*:\s*(\d+)')
TREND_WINDOWS = 20

# run(fn) -> fn(): the thread an analysis step runs in. The heavy parts inside it (parsing,
# the what-if engine, the diagnosis) go through the Lens, i.e. through the server's executor
# (worker processes by default), so the event loop never does them.
Executor = Callable[[Callable[[], Any]], Awaitable[Any]]


async def thread_executor(fn: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(fn)


@dataclass(frozen=True)
class MonitorSettings:
    """``grace_s``: how long a window waits for missing ranks after its first one arrived;
    ``lease_s``: how long a claim holds without renewal (a dead worker's claim comes back after
    it); ``poll_s``: the loops' idle poll interval; ``public_url``: the server's address as the
    chat platform and alert readers see it (links, images); ``analysis_tries``: bounded retries of
    an analysis that crashed (an unreadable trace fails at once)."""

    grace_s: float = 300.0
    lease_s: float = 60.0
    poll_s: float = 0.5
    public_url: str | None = None
    analysis_tries: int = 3


def check_id(kind: str, value: str) -> str:
    if not ID_RE.match(value):
        raise ApiError(
            400,
            "bad_parameter",
            f"{kind} {value!r} must be 1-128 characters of [A-Za-z0-9._-], starting alnum",
        )
    return value


def sniff_world_size(path: Path) -> int | None:
    """The ``world_size`` a Kineto trace carries in its ``distributedInfo`` (first 256 KiB)."""
    with open(path, "rb") as fh:
        m = WORLD_SIZE_RE.search(fh.read(256 * 1024))
    return int(m.group(1)) if m and 0 < int(m.group(1)) <= MAX_RANK + 1 else None


class Monitor:
    """Jobs, windows, analysis and alert delivery for one server process."""

    def __init__(
        self,
        lens: Any,
        settings: MonitorSettings | None = None,
        rules: AlertRules | None = None,
        executor: Executor | None = None,
    ):
        self.lens = lens
        self.settings = settings or MonitorSettings()
        self.rules = rules or AlertRules()
        self.jobs = JobStore(lens.store).open()
        # in a shared database a lease names the replica holding it (operators, tests)
        replica = getattr(lens.store, "replica", None)
        self.owner = f"{replica}:{new_owner()}" if replica else new_owner()
        self.executor = executor or thread_executor
        self.windows_dir = Path(lens.store.data_dir) / "windows"
        self.windows_dir.mkdir(parents=True, exist_ok=True)
        self._wake = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        if self.rules.rules and self.settings.lease_s < 2 * self.rules.delivery.timeout_s:
            raise ValueError("the lease must be at least twice the delivery timeout")

    # -- links -------------------------------------------------------------------------------

    def job_link(self, job: str) -> str | None:
        base = self.settings.public_url
        return f"{base.rstrip('/')}/api/jobs/{job}" if base else None

    # -- ingestion (request path: write the file, record it; no analysis) ---------------------

    async def receive_rank(
        self,
        job: str,
        window: str,
        rank: int,
        chunks: Any,
        *,
        filename: str | None,
        world_size: int | None,
        fmt: str | None,
    ) -> RankArrival:
        """Stream one rank's file (gunzipped on the fly, under the upload caps) into the window's
        folder and record it; the window is assembled when this was its last missing rank."""
        check_id("job", job)
        check_id("window", window)
        if not 0 <= rank <= MAX_RANK:
            raise ApiError(400, "bad_parameter", f"rank {rank} must be between 0 and {MAX_RANK}")
        if world_size is not None and not (1 <= world_size <= MAX_RANK + 1 and rank < world_size):
            raise ApiError(
                400, "bad_parameter", f"world_size={world_size} must be > rank {rank} and <= 65536"
            )
        lens = self.lens
        staging = lens.store.staging_dir()
        try:
            budget = UploadBudget(lens.settings.max_upload_bytes, lens.settings.max_decompressed_bytes)
            name = f"rank{rank}_" + safe_filename(filename, "trace")
            staged = await write_stream(staging, name, chunks, budget)
            ws = world_size or await anyio.to_thread.run_sync(sniff_world_size, staging / staged.name)
            folder = self.windows_dir / job / window
            folder.mkdir(parents=True, exist_ok=True)
            stored = f"{staged.sha256[:12]}-{staged.name}"
            os.replace(staging / staged.name, folder / stored)
            options = {"format": fmt} if fmt else {}
            try:
                arrival = await anyio.to_thread.run_sync(
                    lambda: self.jobs.add_rank(
                        job,
                        window,
                        rank,
                        filename=stored,
                        sha256=staged.sha256,
                        size_bytes=staged.size,
                        world_size=ws,
                        options=options,
                        grace_s=self.settings.grace_s,
                    )
                )
            except WindowConflict as exc:
                if not any(r == rank and f == stored for r, f in self.jobs.rank_files(job, window)):
                    (folder / stored).unlink(missing_ok=True)
                raise ApiError(409, "window_closed", str(exc)) from exc
        finally:
            lens.store.discard(staging)
        if arrival.assembled:
            self._wake.set()
        return arrival

    # -- analysis ------------------------------------------------------------------------------

    def _stage_window(self, job: str, window: str) -> tuple[Path, list[StagedFile]]:
        """Hard-link a window's files into a staging folder, the shape ``Lens.ingest`` takes."""
        staging = self.lens.store.staging_dir()
        files = []
        try:
            for row in self.jobs.rank_rows(job, window):
                src = self.windows_dir / job / window / row["filename"]
                plain = row["filename"].split("-", 1)[1]  # drop the content-hash prefix
                try:
                    os.link(src, staging / plain)
                except OSError:
                    shutil.copyfile(src, staging / plain)
                files.append(StagedFile(plain, row["sha256"], int(row["size_bytes"])))
        except BaseException:
            self.lens.store.discard(staging)
            raise
        return staging, files

    def analyse(self, job: str, window: str) -> tuple[str, dict[str, Any], list[str]]:
        """Store the window's files as one trace, diagnose it and project the summary (runs
        through the executor: never on the event loop). Raises ``ApiError`` when the files
        cannot be analysed (a permanent failure)."""
        w = self.jobs.window(job, window)
        assert w is not None
        notes: list[str] = []
        if w.missing_ranks:
            notes.append(
                f"ranks {_ranges(w.missing_ranks)} of {w.world_size} did not arrive within the grace "
                f"period of {self.settings.grace_s:g} s; analysed the {len(w.ranks)} that did"
            )
        elif not w.world_size:
            notes.append(
                f"world size unknown: analysed the {len(w.ranks)} ranks that arrived by the grace deadline"
            )
        staging, files = self._stage_window(job, window)
        options = dict(w.options, partial=True) if w.missing_ranks or not w.world_size else dict(w.options)
        try:
            result = self.lens.ingest(staging, files, options, f"{job}/{window}")
            diagnosis = self.lens.diagnosis(result.trace_id)
        except ApiError as exc:  # keep what the notes say (missing ranks) next to the reader's words
            raise ApiError(exc.status, exc.code, " ".join([*notes, exc.message])) from exc
        summary = window_summary(diagnosis, w.missing_ranks)
        summary["notes"] = notes + list(diagnosis.notes)[:20]
        return result.trace_id, summary, notes

    def candidates(
        self, job: str, window: str, summary: dict[str, Any]
    ) -> tuple[list[AlertCandidate], list[str]]:
        """The alerts the rules raise for a finished window (before the quiet rules)."""
        rules = [r for r in self.rules.rules if r.matches_job(job)]
        if not rules:
            return [], []
        _, rows = self.jobs.windows(job, TREND_WINDOWS)
        history = [r.summary for r in reversed(rows) if r.status == "done" and r.summary and r.id != window]
        tr = trend([*history, summary])
        out = []
        for rule in rules:
            for key in firing(rule, summary, tr):
                cause = next((c for c in summary.get("causes") or [] if c["id"] == key), None)
                payload = {
                    "job": job,
                    "window": window,
                    "cause": key,
                    "cause_detail": cause,
                    "summary": {k: v for k, v in summary.items() if k not in ("workers", "step_slowdown")},
                    "trend": tr["slowdown"],
                    "link": self.job_link(job),
                }
                out.append(AlertCandidate(rule.name, key, rule.to, rule.reminder_s, payload))
        return out, [r.name for r in rules]

    async def analyse_one(self) -> bool:
        """Claim and run one analysis task; False when none was due."""
        s = self.settings
        claim = await anyio.to_thread.run_sync(lambda: self.jobs.claim_task(self.owner, s.lease_s))
        if claim is None:
            return False
        job, window = claim.row["job"], claim.row["window"]
        result: Any = None
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew, claim)
            try:
                result = await self.executor(lambda: self.analyse(job, window))
            except Exception as exc:  # handled below, outside the task group
                error = exc
            tg.cancel_scope.cancel()
        if isinstance(error, ApiError):
            reason = error.message
            log.warning("window %s/%s cannot be analysed: %s", job, window, reason)
            await anyio.to_thread.run_sync(lambda: self.jobs.fail_task(claim, reason))
            return True
        if error is not None:
            log.error("analysis of window %s/%s crashed (try %d): %r", job, window, claim.tries, error)
            delay = backoff_delay(claim.tries, 2.0, 60.0)
            text = f"{type(error).__name__}: {error}"
            await anyio.to_thread.run_sync(lambda: self.jobs.retry_task(claim, text, delay))
            return True
        trace_id, summary, notes = result
        cands, evaluated = self.candidates(job, window, summary)
        raised = await anyio.to_thread.run_sync(
            lambda: self.jobs.finish_task(
                claim,
                trace_id=trace_id,
                summary=summary,
                notes=notes,
                candidates=cands,
                rules_evaluated=evaluated,
                max_tries=self.rules.delivery.max_tries,
            )
        )
        log.info("window %s/%s analysed: S=%.3f, %d alert(s)", job, window, summary["slowdown"], len(raised))
        if raised:
            self._wake.set()
        return True

    async def _renew(self, claim: Claim) -> None:
        while True:
            await anyio.sleep(self.settings.lease_s / 3)
            ok = await anyio.to_thread.run_sync(lambda: self.jobs.renew_task(claim, self.settings.lease_s))
            if not ok:
                log.warning("lost the lease on analysis task %d; another worker has it", claim.id)
                return

    # -- delivery ------------------------------------------------------------------------------

    def render(
        self, dest: Destination, payload: dict[str, Any], attempt: int
    ) -> tuple[bytes, dict[str, str]]:
        """The body and headers of one try to ``dest``."""
        if dest.type == "slack":
            title = f"Straggler alert: {payload['job']} — {payload['cause']}"
            body = json.dumps(slack_message(payload["summary"], title, payload.get("link"))).encode()
            return body, {"Content-Type": "application/json"}
        body = json.dumps(payload, sort_keys=True).encode()
        assert dest.secret is not None
        return body, webhook_headers(dest.secret, body, payload["alert_id"], attempt)

    async def deliver_one(self, client: httpx.AsyncClient) -> bool:
        """Claim and send one due outbox row; False when none was due."""
        d = self.rules.delivery
        claim = await anyio.to_thread.run_sync(
            lambda: self.jobs.claim_delivery(self.owner, self.settings.lease_s)
        )
        if claim is None:
            return False
        dest = self.rules.destinations.get(claim.row["destination"])
        status: int | None = None
        error: str | None = None
        if dest is None:
            error = f"destination {claim.row['destination']!r} is no longer configured"
        else:
            body, headers = self.render(dest, claim.row["payload"], claim.tries)
            try:
                resp = await client.post(dest.url, content=body, headers=headers, timeout=d.timeout_s)
                status = resp.status_code
                if not 200 <= status < 300:
                    error = f"HTTP {status}: {resp.text[:200]}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
        delay = backoff_delay(claim.tries, d.backoff_s, d.max_backoff_s)
        state = await anyio.to_thread.run_sync(
            lambda: self.jobs.record_delivery(
                claim, ok=error is None, status=status, error=error, retry_delay_s=delay
            )
        )
        log.info(
            "alert %s to %s, try %d: %s", claim.row["alert_id"], claim.row["destination"], claim.tries, state
        )
        return True

    # -- loops ---------------------------------------------------------------------------------

    async def _idle(self) -> None:
        with anyio.move_on_after(self.settings.poll_s):
            await self._wake.wait()
        self._wake = anyio.Event()

    async def assembly_loop(self) -> None:
        while True:
            done = await anyio.to_thread.run_sync(self.jobs.assemble_overdue)
            if done:
                self._wake.set()
            await anyio.sleep(self.settings.poll_s)

    async def analysis_loop(self) -> None:
        while True:
            try:
                busy = await self.analyse_one()
            except Exception:  # a store hiccup must not end the loop
                log.exception("analysis loop error")
                busy = False
            if not busy:
                await self._idle()

    async def delivery_loop(self) -> None:
        async with httpx.AsyncClient(follow_redirects=False) as client:
            while True:
                try:
                    busy = await self.deliver_one(client)
                except Exception:
                    log.exception("delivery loop error")
                    busy = False
                if not busy:
                    await anyio.sleep(min(self.settings.poll_s, 0.5))

    async def run(self) -> None:
        """All three loops, until cancelled (the server's lifespan ends)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self.assembly_loop)
            tg.start_soon(self.analysis_loop)
            tg.start_soon(self.delivery_loop)

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in the monitor's task group: work that outlives a request (a slash
        command's delayed answer); ends with the server."""
        if self._tg is None:
            raise ApiError(503, "not_running", "the monitoring service is not running")
        self._tg.start_soon(fn, *args)

    def wait_until(self, pred: Callable[[], bool], timeout: float) -> bool:
        """Poll ``pred`` for up to ``timeout`` seconds (CLI and tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.05)
        return pred()


def _ranges(values: list[int]) -> str:
    out, start, prev = [], None, None
    for v in sorted(values):
        if start is None:
            start = prev = v
        elif prev is not None and v == prev + 1:
            prev = v
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = v
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out)


def start_monitor(lens: Any) -> Monitor:
    """The monitor of a running server, configured from its settings."""
    st = lens.settings
    ms = MonitorSettings(grace_s=st.grace_s, lease_s=st.lease_s, poll_s=st.poll_s, public_url=st.public_url)
    return Monitor(lens, ms, st.alerts)
