"""What every agent harness is: the interface the agent loop talks to, and its profile.

A harness owns one conversation format: it renders the first prompt, turns each reply into
terminal commands (or feedback when the reply cannot be used), renders what the model sees next
(terminal output, confirmations, errors, timeouts) and says when the episode is done. The agent
loop (service/episode.py) only moves tokens and time; it never words a message itself.

Every text a harness sends comes from its profile, a TOML file with `{placeholder}` fields
(Python format syntax: a literal brace is doubled) for every variable part:

    [profile]
    harness = "terminus-2"      # which harness reads it
    variant = "json"            # harness-specific (terminus-2: json or xml)
    source = "..."              # where the texts came from (informative)
    [behaviour]                 # numbers and switches, e.g. output_cap_bytes = 10000
    [texts]                     # the message forms, by name; sub-tables group them

The profile's hash (sha256 of its canonical JSON form, so comments and layout do not count) is
recorded in every trajectory, next to the harness name.
"""

from __future__ import annotations

import hashlib
import json
import string
import tomllib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"


class ProfileError(ValueError):
    """A profile file is missing, malformed, or does not fit its harness."""


def placeholders(text: str) -> set[str]:
    """The `{field}` names a format string uses."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as e:
        raise ProfileError(f"not a valid format string ({e}): {text[:80]!r}") from e


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        elif isinstance(value, str):
            out[name] = value
        else:
            raise ProfileError(f"texts.{name} must be a string, not {type(value).__name__}")
    return out


@dataclass(frozen=True)
class Profile:
    """A harness's texts and behaviour settings, loaded from TOML."""

    harness: str
    variant: str | None
    source: str
    behaviour: dict[str, Any]
    texts: dict[str, str]  # flattened: "parser.no_json" for [texts.parser] no_json
    hash: str
    path: str | None = None

    def text(self, name: str, **values: Any) -> str:
        try:
            template = self.texts[name]
        except KeyError:
            raise ProfileError(f"profile has no text {name!r}") from None
        return template.format(**values)

    def number(self, name: str, default: float | None = None) -> Any:
        value = self.behaviour.get(name, default)
        if value is None:
            raise ProfileError(f"profile has no behaviour setting {name!r}")
        return value

    @classmethod
    def from_data(cls, data: Mapping[str, Any], path: str | None = None) -> Profile:
        head = data.get("profile")
        if not isinstance(head, Mapping) or not isinstance(head.get("harness"), str):
            raise ProfileError("a profile needs a [profile] table with harness = NAME")
        texts = data.get("texts")
        if not isinstance(texts, Mapping):
            raise ProfileError("a profile needs a [texts] table")
        behaviour = data.get("behaviour", {})
        if not isinstance(behaviour, Mapping):
            raise ProfileError("[behaviour] must be a table")
        flat = _flatten(texts)
        for text in flat.values():
            placeholders(text)  # raises on a malformed format string
        canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return cls(
            harness=head["harness"],
            variant=head.get("variant"),
            source=str(head.get("source", "")),
            behaviour=dict(behaviour),
            texts=flat,
            hash=hashlib.sha256(canonical.encode()).hexdigest(),
            path=path,
        )

    def check(self, required: Mapping[str, set[str]]) -> None:
        """Every text the harness needs is there and uses only the placeholders it fills in."""
        problems = []
        for name, allowed in required.items():
            if name not in self.texts:
                problems.append(f"missing text {name!r}")
                continue
            extra = placeholders(self.texts[name]) - allowed
            if extra:
                problems.append(
                    f"text {name!r} uses unknown placeholders {sorted(extra)} "
                    f"(allowed: {sorted(allowed) or 'none'})"
                )
        if problems:
            where = self.path or f"the {self.harness} profile"
            raise ProfileError(f"{where}: " + "; ".join(problems))


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ProfileError(f"cannot read profile {p}: {e}") from e
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ProfileError(f"{p} is not a valid TOML file: {e}") from e
    return Profile.from_data(data, path=str(p))


# --- writing profiles (import-harbor): a small TOML writer that keeps every text exact ---


def _toml_string(text: str) -> str:
    """A TOML string that parses back to exactly `text`: a multi-line literal string where that
    is exact and readable, a basic string with escapes otherwise."""
    literal_ok = (
        "'''" not in text
        and not text.endswith("'")
        and all(ch in "\n\t" or (ord(ch) >= 0x20 and ord(ch) != 0x7F) for ch in text)
    )
    if literal_ok and "\n" in text:
        return "'''\n" + text + "'''"  # the newline right after the opening quotes is dropped
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    raise TypeError(f"cannot write {type(value).__name__} to a profile")


def dump_profile(data: Mapping[str, Any], header: str = "") -> str:
    """TOML for a profile's data (tables of scalars, nested tables under [texts])."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]

    def table(name: str, body: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, Mapping)}
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        for key, value in scalars.items():
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
        for key, value in body.items():
            if isinstance(value, Mapping):
                table(f"{name}.{_toml_key(key)}", value)

    for name, body in data.items():
        table(name, body)
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != json.loads(json.dumps(data)):
        raise ProfileError("the profile did not survive a TOML round trip")
    return text


# --- the interface the agent loop talks to ---


@dataclass(frozen=True)
class Command:
    keystrokes: str
    duration: float


class Terminal(Protocol):
    """The sample's terminal, as a harness sees it."""

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        """Type keys, wait up to wait_s (less once the shell is idle) and return the new output
        the terminal log recorded since the previous call."""
        ...

    async def capture(self, *, entire: bool) -> str | None:
        """The pane as text: its whole history (entire) or the visible screen; None when it
        cannot be read."""
        ...

    async def resize(self, width: int, height: int) -> None: ...


@dataclass
class Step:
    """What follows one reply: the messages the model sees next, or the end of the episode."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    commands: list[Command] = field(default_factory=list)  # what was typed
    note: str | None = None  # for the readable transcript (a system message), never the model


class HarnessSession(ABC):
    """One sample's conversation state (pending confirmation, terminal capture baseline)."""

    async def start(self, terminal: Terminal) -> None:  # noqa: B027 - optional hook
        """Called once the sample's sandbox is up, before its first reply is acted on."""

    @abstractmethod
    async def step(self, reply: str, terminal: Terminal, *, truncated: bool = False) -> Step:
        """Act on one reply. `truncated`: generation stopped at max_tokens."""


class Harness(ABC):
    """A conversation format. Stateless: per-sample state lives in its sessions."""

    name: str
    profile: Profile
    # Context summarization (terminus-2's, terminus_summary.Summarizer); None: the harness never
    # summarizes, and an episode whose context is full ends with `context_length`.
    summarizer: Any = None

    @abstractmethod
    def first_messages(self, instruction: str) -> list[dict[str, Any]]:
        """The chat messages of the first prompt (rendered by the server's chat template)."""

    def tools(self) -> list[dict[str, Any]] | None:
        """Tool definitions the chat template renders into the prompt (None: no tools)."""
        return None

    def summarize_below_free_tokens(self) -> int | None:
        """The agent summarizes its context before a turn once fewer tokens than this are free
        (see `summarizer`). None: never before a turn."""
        return None

    @abstractmethod
    def session(self, *, max_tokens: int) -> HarnessSession:
        """A new sample's conversation state. `max_tokens`: the request's tokens per turn."""

    def describe(self) -> dict[str, Any]:
        """What a trajectory records about the harness."""
        return {"harness": self.name, "profile_hash": self.profile.hash}


class SystemPromptHarness(Harness):
    """A harness whose profile has a system prompt, a first user message with the instruction
    and the initial terminal, and a head-and-tail cap on output (`max_chars`)."""

    profile: Profile
    max_chars: int

    def first_messages(self, instruction: str) -> list[dict[str, Any]]:
        terminal = self.profile.behaviour.get("initial_terminal", "")
        return [
            {"role": "system", "content": self.profile.text("system")},
            {
                "role": "user",
                "content": self.profile.text(
                    "first_user", instruction=instruction.strip(), terminal_state=terminal
                ),
            },
        ]

    def truncate(self, text: str) -> str:
        if len(text) <= self.max_chars:
            return text
        half = self.max_chars // 2
        return self.profile.text(
            "output_truncated", head=text[:half], tail=text[-half:], dropped=len(text) - 2 * half
        )
