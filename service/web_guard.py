"""What a web browser may do with the service and with `rollouts view`.

Both listen on loopback without a key by default, so any page the user opens could reach them
through the browser: by DNS rebinding (the page's own name re-pointed at 127.0.0.1, which makes
the service same-origin to it) or by a cross-site form post. Two checks close that:

- the Host header must name an allowed host (loopback names, the listening address, and the
  `--allowed-host` names); a rebound name is not one of them;
- a state-changing request (not GET, HEAD or OPTIONS) that carries an Origin header must come
  from the service's own origin (the Origin names the Host the request was sent to), so another
  site's page cannot post to it. Programs (httpx, curl, trainers) send no Origin.

Every response also tells browsers not to frame it, not to sniff its type, and to run only the
service's own scripts (the web view loads nothing from elsewhere).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.request_limits import send_error

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def host_name(value: str) -> str:
    """The name in a Host header or an origin's netloc, without the port, lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8080
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class WebGuard:
    """ASGI middleware: 421 for a Host not allowed (None: any), 403 for a cross-origin
    state-changing request; security headers on every response."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str] | None) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if self.allowed is not None and host_name(host) not in self.allowed:
            await send_error(
                send,
                421,
                b"Host %s is not served here; start the service with --allowed-host NAME "
                b"to reach it by that name" % (host.encode("latin-1")[:200] or b"(none)"),
            )
            return
        origin = headers.get("origin")
        if origin is not None and scope["method"] not in SAFE_METHODS:
            if urlsplit(origin).netloc.lower() != host.lower():
                await send_error(send, 403, b"cross-origin request refused (Origin header)")
                return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, secured)
