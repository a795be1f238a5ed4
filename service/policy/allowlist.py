"""Which policy servers a rollout request may name (`serve --allow-policy-url PREFIX`).

A request that names its own policy servers (a trainer's vLLM replicas) makes the service send
HTTP requests there, so the service must not become a way to reach any host its network sees.
A URL is allowed only when its parsed parts equal a prefix's: the same scheme, the same host
(compared as parsed, lower-cased), the same port (the scheme's default when none is written),
and a path that is the prefix's path or lies below it at a segment boundary (`/a` allows `/a`
and `/a/b`, never `/ab`). Comparing strings instead lets `http://allowed.example@evil` (user
info before the real host), `http://allowed.example.evil` (a longer host name) and
`http://allowed.example:8000x` through. So any URL with user info, a query, a fragment, a
backslash, a percent escape or a dot segment in its path, whitespace or a control character
is refused outright: each is a way to make two parsers disagree about where a request goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Characters a plain base URL needs; anything else (spaces, controls, '\\', '%', non-ASCII)
# is a way to make two parsers disagree.
_PLAIN = re.compile(r"[A-Za-z0-9\-._~:/\[\]]+")


class NotAllowed(ValueError):
    """The URL is not one the operator allowed (the message says why, without the list)."""


@dataclass(frozen=True)
class Origin:
    """A URL's parts that decide where a request goes."""

    scheme: str
    host: str
    port: int
    path: str  # without its trailing '/', '' for the root

    def covers(self, other: Origin) -> bool:
        """`other` is this prefix or lies below it."""
        if (self.scheme, self.host, self.port) != (other.scheme, other.host, other.port):
            return False
        return other.path == self.path or other.path.startswith(self.path + "/")


def parse_origin(url: str) -> Origin:
    """The parts of a plain http(s) base URL; NotAllowed for anything that is not one."""
    if not _PLAIN.fullmatch(url):
        raise NotAllowed("only a plain http(s) base URL (no user info, query, escapes)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:  # a port that is not a number, a broken IPv6 literal
        raise NotAllowed(f"not a URL ({e})") from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise NotAllowed("the scheme must be http or https")
    if not parts.hostname or "@" in parts.netloc or parts.query or parts.fragment:
        raise NotAllowed("a host is needed, and no user info, query or fragment")
    # The netloc must be the host (and port) and nothing more: `urlsplit` would otherwise
    # accept forms other HTTP stacks read differently.
    host = parts.hostname.lower()
    netloc = parts.netloc.lower()
    written = f"[{host}]" if ":" in host else host
    if netloc not in (written, f"{written}:{port}"):
        raise NotAllowed("the host part is not a plain host[:port]")
    segments = parts.path.split("/")
    if any(seg in (".", "..") for seg in segments):
        raise NotAllowed("no '.' or '..' path segments")
    path = parts.path.rstrip("/")
    if "//" in path:
        raise NotAllowed("no empty path segments")
    return Origin(parts.scheme, host, port or _DEFAULT_PORTS[parts.scheme], path)


class PolicyAllowList:
    """The operator's prefixes. Empty: no request may name policy servers."""

    def __init__(self, prefixes: list[str]) -> None:
        self.prefixes = list(prefixes)
        self._origins: list[Origin] = []
        for prefix in self.prefixes:
            try:
                self._origins.append(parse_origin(prefix.strip()))
            except NotAllowed as e:
                raise ValueError(f"--allow-policy-url {prefix!r}: {e}") from None

    def __bool__(self) -> bool:
        return bool(self._origins)

    def check(self, url: str) -> None:
        """NotAllowed unless `url` is a plain base URL under one of the prefixes."""
        origin = parse_origin(url)
        if not any(prefix.covers(origin) for prefix in self._origins):
            raise NotAllowed("not under any --allow-policy-url prefix of this service")
