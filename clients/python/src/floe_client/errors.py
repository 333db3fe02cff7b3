"""Errors Floe answers, as exceptions.

Every management and catalog error body is `{"error": {"message", "type", "code"}}`. A
server-side failure's message carries only an error id (`…; error id <uuid>`): the cause is
in the server's log under that id, so `FloeError.error_id` is what an operator greps for.
Every HTTP answer also names its audit record in `x-request-id` (`FloeError.request_id`).
Messages never include what the client sent: no credentials, no tokens.
"""

from __future__ import annotations

import re

_ERROR_ID = re.compile(r"error id ([0-9a-fA-F-]{36})")


class FloeError(Exception):
    """An error answered by Floe (or, with `status` None, raised before an answer)."""

    status: int | None
    error_type: str
    message: str
    error_id: str | None
    request_id: str | None
    retry_after: float | None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str = "",
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.error_type = error_type
        self.message = message
        self.error_id = error_id_in(message)
        self.request_id = request_id
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.error_type:
            parts.append(self.error_type)
        head = " ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.request_id:
            text += f" (request id {self.request_id})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, error_type={self.error_type!r}, "
            f"message={self.message!r}, error_id={self.error_id!r}, request_id={self.request_id!r})"
        )


class BadRequest(FloeError):
    """400: the request broke a rule its message names."""


class Unauthenticated(FloeError):
    """401: missing, expired or refused credentials."""


class Forbidden(FloeError):
    """403: the caller lacks the privilege the message names."""


class NotFound(FloeError):
    """404: no such warehouse, principal, role, table, job…"""


class Unsupported(FloeError):
    """406: an operation Floe does not do."""


class Conflict(FloeError):
    """409: already exists, or the state changed underneath (commit conflicts, protection)."""


class PayloadTooLarge(FloeError):
    """413: a body or a decoded request over its limit."""


class TooManyRequests(FloeError):
    """429: a tenant limit or overload; `retry_after` says when to try again."""


class QuotaExceeded(FloeError):
    """507: a tenant's storage quota."""


class ServerError(FloeError):
    """5xx: the server failed; `error_id` names the cause in its log."""


class CommitStateUnknown(ServerError):
    """502: a commit's outcome is unknown; reload before retrying."""


class Unavailable(ServerError):
    """503: overloaded or starting; `retry_after` says when to try again."""


class Timeout(ServerError):
    """504: a statement ran out of time."""


class ConfigurationError(FloeError):
    """The client was not told where Floe is or how to authenticate."""


_BY_STATUS: dict[int, type[FloeError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    406: Unsupported,
    409: Conflict,
    413: PayloadTooLarge,
    429: TooManyRequests,
    502: CommitStateUnknown,
    503: Unavailable,
    504: Timeout,
    507: QuotaExceeded,
}


def error_id_in(message: str) -> str | None:
    """The server-side error id a message carries, if any."""
    match = _ERROR_ID.search(message or "")
    return match.group(1) if match else None


def error_class(status: int | None) -> type[FloeError]:
    if status is None:
        return FloeError
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    if status == 422:
        return BadRequest
    return FloeError


def from_body(
    status: int,
    body: object,
    text: str,
    request_id: str | None = None,
    retry_after: float | None = None,
) -> FloeError:
    """The exception for an error answer: Floe's `ErrorResponse`, OAuth2's `{error,
    error_description}` (the token endpoint) or, failing both, the status and the raw text."""
    error_type, message = "", ""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            error_type = str(inner.get("type", ""))
            message = str(inner.get("message", ""))
        elif isinstance(inner, str):
            error_type = inner
            message = str(body.get("error_description", ""))
    if not message:
        message = (text or "").strip()[:2000] or f"HTTP {status}"
    return error_class(status)(
        message,
        status=status,
        error_type=error_type,
        request_id=request_id,
        retry_after=retry_after,
    )
