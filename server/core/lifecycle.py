"""Retention: traces older than ``--retention-days`` are deleted at start and periodically.

Deleting goes through ``Lens.delete`` (rows, cached results, folder, memo), one trace at a
time; nothing else in the store is touched. Without a retention setting nothing runs.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import anyio

from server.core.service import Lens

log = logging.getLogger("straggler_lens.server")


def expire(lens: Lens, now: datetime | None = None) -> list[str]:
    """Delete the traces stored more than ``retention_days`` before ``now``; their ids."""
    days = lens.settings.retention_days
    if days is None:
        return []
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    gone = []
    for tid in lens.store.created_before(cutoff):
        if lens.store.delete(tid):
            lens.forget(tid)
            gone.append(tid)
    if gone:
        log.info("retention: deleted %d trace(s) older than %g days", len(gone), days)
    return gone


async def retention_loop(lens: Lens) -> None:
    """``expire`` every ``retention_check_s`` seconds, until cancelled (the start's expiry runs
    before the server serves: ``open_lens``)."""
    while True:
        await anyio.sleep(lens.settings.retention_check_s)
        await anyio.to_thread.run_sync(expire, lens)
