"""What every MCP tool module shares: tool annotations, argument types, the error wrapper, the
progress relay and the ``lens()`` accessor type. Imports no tool module (tool modules import it).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BeforeValidator, Field

from server.core import faults
from server.core.errors import ApiError
from server.core.security import PathNotAllowed
from server.core.service import Lens
from server.core.wording import in_terms

P = ParamSpec("P")
log = logging.getLogger("straggler_lens.server")

# How a tool module reaches the running Lens (set by the app's lifespan, read per call).
LensFn = Callable[[], Lens]

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
UPLOAD = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

TraceId = Annotated[
    str, Field(description="trace handle from upload_trace / list_traces", min_length=1, max_length=64)
]
Limit = Annotated[int, Field(ge=1, le=100, description="page size (max 100)")]
Offset = Annotated[int, Field(ge=0, description="items to skip (offset pagination)")]
Size = Annotated[int | None, Field(ge=1, le=1_000_000, description="parallel size; overrides the meta")]


def _null_is_empty(value: Any) -> Any:
    return "" if value is None else value


# An optional string argument is ``Annotated[str, NULL_IS_EMPTY, Field(...)] = ""``: "" when absent
# (an explicit JSON null too). Its annotation must be exactly ``str``: the SDK JSON-parses a string
# argument whose annotation is anything else (``str | None`` included) before validating it, so a
# JSON document given as text (a Kineto file, '["gc pause"]') would arrive as a list or a dict and
# be refused. tests/server/test_server_contract.py checks every tool's string arguments for this.
NULL_IS_EMPTY = BeforeValidator(_null_is_empty)


def tool_errors(fn: Callable[P, Any]) -> Callable[P, Any]:
    """Turn the service's ``ApiError`` (and refused paths) into ``ToolError`` text the model reads.

    The docstring becomes the tool's description; it is dedented (Python 3.11 keeps the source
    indentation, which the SDK would send to the client as is)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            return await fn(*args, **kwargs)
        except ApiError as exc:
            raise ToolError(in_terms(exc.message, "mcp")) from exc
        except PathNotAllowed as exc:
            raise ToolError(str(exc)) from exc
        except ToolError:
            raise
        except Exception as exc:  # the one mapping (disk full, a passed budget, bad input)
            mapped = faults.api_error(exc)
            if mapped is None:
                log.exception("tool %s failed", fn.__name__, exc_info=exc)
                raise ToolError(
                    "internal error in the server (its log has the traceback); the stored traces "
                    "are unchanged"
                ) from exc
            raise ToolError(mapped.message) from exc

    wrapper.__doc__ = inspect.cleandoc(fn.__doc__ or "")
    return wrapper


class ProgressRelay:
    """Forward progress to the client as ``(fraction, 1.0, message)``, strictly increasing.

    Called with the engine's ``progress(fraction, message)`` signature from a worker thread of
    the event loop (jobs run in threads) or on the loop itself (the executor relays a worker
    process's progress there, and says so when a job waits in its queue); ``step`` is the
    loop's own awaitable form. Progress is advisory: a client that went away never fails the
    analysis.
    """

    def __init__(self, ctx: Context[Any] | None):
        self.ctx = ctx
        self.last = -1.0
        self._sending: set[asyncio.Future[Any]] = set()

    def _fresh(self, fraction: float) -> bool:
        if self.ctx is None or fraction <= self.last:
            return False
        self.last = fraction
        return True

    def __call__(self, fraction: float, message: str = "") -> None:
        if not self._fresh(fraction):
            return
        assert self.ctx is not None
        send = functools.partial(self.ctx.report_progress, fraction, 1.0, message or None)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a worker thread: wait for the send, which keeps the order
            try:
                anyio.from_thread.run(send)
            except Exception:
                self.ctx = None
            return
        task = asyncio.ensure_future(send())
        self._sending.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Future[Any]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.ctx = None

    async def step(self, fraction: float, message: str) -> None:
        if not self._fresh(fraction):
            return
        assert self.ctx is not None
        try:
            await self.ctx.report_progress(fraction, 1.0, message)
        except Exception:
            self.ctx = None
