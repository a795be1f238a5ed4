"""The default harness: rollouts' own conversation format, a terminus-2-like JSON protocol in our
own words (service/agent/profiles/default.toml).

A system prompt and a "Task:" message; each reply is one JSON object (service/agent/protocol.py);
its commands are typed into the terminal and the model sees what the terminal log recorded,
head and tail kept past `max_observation_chars`; `task_complete` is asked to be confirmed once;
a reply that cannot be used gets an error message and changes nothing.
"""

from __future__ import annotations

import functools

from service.agent.harnesses.base import (
    PROFILES_DIR,
    Command,
    HarnessSession,
    Profile,
    Step,
    SystemPromptHarness,
    Terminal,
    load_profile,
)
from service.agent.protocol import ReplyError, parse_reply

NAME = "default"
TEXTS: dict[str, set[str]] = {
    "system": set(),
    "first_user": {"instruction", "terminal_state"},
    "observation": {"output"},
    "confirm": {"output"},
    "error": {"problem"},
    "output_truncated": {"head", "tail", "dropped"},
    "errors.no_json": set(),
    "errors.unclosed": set(),
    "errors.invalid_json": {"msg", "pos"},
    "errors.invalid_field": {"field", "msg"},
}


@functools.cache
def default_profile() -> Profile:
    return load_profile(PROFILES_DIR / "default.toml")


class DefaultHarness(SystemPromptHarness):
    name = NAME

    def __init__(self, profile: Profile | None = None) -> None:
        self.profile = profile or default_profile()
        self.profile.check(TEXTS)
        self.errors = {
            k.removeprefix("errors."): v
            for k, v in self.profile.texts.items()
            if k.startswith("errors.")
        }
        self.max_duration_s = float(self.profile.number("max_duration_s", 60.0))
        self.max_chars = int(self.profile.number("max_observation_chars", 16_000))

    def session(self, *, max_tokens: int = 4096) -> HarnessSession:
        return _Session(self)


class _Session(HarnessSession):
    def __init__(self, harness: DefaultHarness) -> None:
        self.h = harness
        self.awaiting_confirmation = False

    async def step(self, reply: str, terminal: Terminal, *, truncated: bool = False) -> Step:
        h = self.h
        try:
            parsed = parse_reply(reply, h.errors)
        except ReplyError as e:
            return Step(messages=[{"role": "user", "content": h.profile.text("error", problem=e)}])
        commands = [
            Command(c.keystrokes, min(c.duration, h.max_duration_s)) for c in parsed.commands
        ]
        outputs = [await terminal.send_keys(c.keystrokes, c.duration) for c in commands]
        output = h.truncate("".join(outputs))
        if parsed.task_complete and self.awaiting_confirmation:
            return Step(done=True, commands=commands)
        self.awaiting_confirmation = parsed.task_complete
        form = "confirm" if parsed.task_complete else "observation"
        content = h.profile.text(form, output=output)
        return Step(messages=[{"role": "user", "content": content}], commands=commands)
