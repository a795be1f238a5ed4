"""The error responses each route documents in the OpenAPI schema (all bodies: ErrorResponse).

Every status a route can really return is listed, so clients (and the schema fuzzer) can rely
on the schema: the middleware limits (408, 413) and auth (401) apply to every guarded route.
"""

from __future__ import annotations

from typing import Any

from service.wire import ErrorResponse

_DESCRIPTIONS = {
    401: "Missing or wrong bearer token (Authorization: Bearer <key>).",
    403: "The request names something the operator did not allow; `detail` names the field.",
    404: "No such object.",
    408: "The request body did not arrive within the server's body read timeout.",
    409: "Conflict with the object's state.",
    413: "The request body is over the server's size limit.",
    422: "Invalid request: `detail` lists the offending fields.",
    429: "The queue is full; retry after Retry-After seconds.",
    503: "Unavailable for a reason outside the request; the detail says which.",
}

# What any route behind the API key may answer before the route itself runs.
GUARDED = (401, 408, 413, 422)


def errors(*codes: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each code with the error model; `descriptions` (keyed
    `e404`, ...) override the generic text."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        text = descriptions.get(f"e{code}", _DESCRIPTIONS[code])
        out[code] = {"model": ErrorResponse, "description": text}
    return out
