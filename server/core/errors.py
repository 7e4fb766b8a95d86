"""One error type for the HTTP surface and the one JSON shape every error response has.

Every REST error, and every refusal by the security middleware (on ``/mcp`` too), answers
``{"error": {"status": <int>, "code": "<snake_case>", "message": "<what is wrong and what to do>"}}``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from starlette.responses import JSONResponse


class ErrorDetail(BaseModel):
    status: int = Field(description="the HTTP status, repeated in the body")
    code: str = Field(description="stable machine-readable reason, e.g. not_found, trace_invalid")
    message: str = Field(description="what is wrong and, where possible, what to do about it")


class ErrorBody(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


class ApiError(Exception):
    """An error with its HTTP status and code; ``rest.py`` and the middleware render it once."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}

    def __reduce__(self) -> tuple[Any, ...]:
        # raised in a worker process, it crosses back by pickle: keep every field
        return (type(self), (self.status, self.code, self.message, self.headers))

    def response(self) -> JSONResponse:
        return error_response(self.status, self.code, self.message, self.headers)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"error": {"status": status, "code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def not_found(kind: str, ident: str, hint: str = "") -> ApiError:
    msg = f"no {kind} {ident!r}" + (f"; {hint}" if hint else "")
    return ApiError(404, "not_found", msg)
