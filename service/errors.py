"""Errors a client caused, typed by what went wrong. Each carries its HTTP status and, where one
field of the request is to blame, that field's location; `app.py` maps them to responses in
one exception handler, so routers never build error responses by hand."""

from __future__ import annotations


class ClientError(Exception):
    """Base of every error that is the caller's doing (4xx)."""

    status_code = 400

    def __init__(self, message: str, *, field: tuple[str | int, ...] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field  # e.g. ("body", "tasks", "task_ids"): the part of the request to fix


class NotFound(ClientError):
    status_code = 404


class Conflict(ClientError):
    status_code = 409


class InvalidRequest(ClientError):
    """Well-formed, but the service cannot act on it (a task id the source lacks, more samples
    than the queue holds). Answered like a schema error: `detail: [{loc, msg, type}]`, with
    `field` as `loc` and `kind` as `type`."""

    status_code = 422

    def __init__(
        self,
        message: str,
        *,
        field: tuple[str | int, ...] | None = None,
        kind: str = "value_error",
    ) -> None:
        super().__init__(message, field=field)
        self.kind = kind


class Forbidden(InvalidRequest):
    """The request names something the operator did not allow (a policy server outside
    `--allow-policy-url`). Answered like InvalidRequest, with status 403."""

    status_code = 403

    def __init__(self, message: str, *, field: tuple[str | int, ...] | None = None) -> None:
        super().__init__(message, field=field, kind="not_allowed")


class Busy(ClientError):
    """Come back later: the queue or the disk is full. Sent with Retry-After."""

    status_code = 429


class Unavailable(ClientError):
    """The service cannot do it now, for a reason the message names (no policy server could
    take the new weights)."""

    status_code = 503
