"""The terminus-2 harness: the conversation of Harbor's terminus-2 agent (harbor 0.25), driven by
a profile imported from the user's own Harbor installation (`rollouts agent import-harbor`).
This module holds behaviour only; every text is the profile's.

What it reproduces, message for message:
- No system message. The first user message is the profile's `first_prompt` with the task
  instruction and the initial terminal state (the screen form of a fresh pane, capped).
- Each reply is parsed by the JSON or XML parser (terminus_parsers.py), with Harbor's leniency
  and automatic corrections. A feedback text is built from the parse error and warnings; when it
  holds the error form, nothing is typed and the model gets the `parse_error` message.
- Commands are typed one by one, each waiting its `duration`, capped at 60 s. A send that times
  out ends the batch with the `timeout` message (Harbor types non-blocking, so in practice only a
  terminal that stops answering gets it).
- The observation is the incremental terminal output, found the way Harbor's tmux session finds
  it: the pane's whole history is captured after each batch and the text after the previous
  capture's last line is "new output"; when the previous capture is not found in the new one,
  or nothing new appeared, the visible screen is shown instead. Output is capped at the
  profile's byte count (10,000 in Harbor), head and tail kept, where Harbor caps it (twice for a
  plain observation, as Harbor does).
- `task_complete` must be said twice in a row: the first gets the `confirmation` message, the
  second ends the episode. Warnings ride along with the next observation (not with a
  confirmation).
- A reply cut at max_tokens gets the `output_length` message (with the parser's warnings about
  the cut reply), and nothing of it is typed. With the XML variant, a cut reply that still holds
  a whole response is "salvaged" by Harbor, whose agent then fails on it: the episode ends.
- Context summarization, as terminus-2 does it by default (terminus_summary.py: the proactive
  path under `summarize_below_free_tokens` free, the passive one on the engine's context-length
  error, the three calls, the short summary and the fallback, the rewritten conversation). The
  agent loop runs each call on the policy like a turn and keeps it as a segment of the
  trajectory (service/episode_summary.py). With the profile's `summarize = false` the episode
  ends with `context_length` once nothing more fits, as Harbor's agent fails then.
"""

from __future__ import annotations

from typing import Any

from service.agent.harnesses.base import (
    Command,
    Harness,
    HarnessSession,
    Profile,
    ProfileError,
    Step,
    Terminal,
)
from service.agent.harnesses.terminus_parsers import (
    JSON_TEXTS,
    XML_TEXTS,
    JSONParser,
    ParseResult,
    XMLParser,
)
from service.agent.harnesses.terminus_summary import Summarizer

NAME = "terminus-2"
# Harbor caps every command's duration with min(duration, 60): an int, so a capped duration
# prints as "60" in the timeout message.
MAX_DURATION_S = 60
# The prompt line of a fresh terminal in our sandboxes (root, hostname "sandbox", in /app), as
# tmux captures it (trailing blanks trimmed). The first prompt is rendered before the group's
# sandboxes exist, so its terminal state is this line on an otherwise empty pane.
INITIAL_PROMPT_LINE = "root@sandbox:/app#"

LOOP_TEXTS: dict[str, set[str]] = {
    "first_prompt": {"instruction", "terminal_state"},
    "timeout": {"command", "timeout_sec", "terminal_state"},
    "confirmation": {"terminal_output"},
    "parse_error": {"feedback"},
    "warnings": {"feedback", "terminal_output"},
    "feedback_error": {"error"},
    "feedback_error_warnings": {"error", "warnings"},
    "feedback_warnings": {"warnings"},
    "output_length": {"max_tokens"},
    "output_length_warnings": {"max_tokens", "warnings"},
    "new_output": {"output"},
    "screen": {"screen"},
    "output_limited": {"head", "tail", "max_bytes", "omitted_bytes"},
}


VARIANTS = ("json", "xml")  # terminus-2's reply formats, the first its default


def required_texts(variant: str) -> dict[str, set[str]]:
    parser = {"json": JSON_TEXTS, "xml": XML_TEXTS}.get(variant)
    if parser is None:
        raise ProfileError(f"terminus-2 variant must be json or xml, not {variant!r}")
    return {**LOOP_TEXTS, **{f"parser.{k}": v for k, v in parser.items()}}


def _marker(template: str, field: str) -> str:
    """The fixed words a feedback form starts with (what Harbor's loop looks for in it)."""
    return template.split("{" + field + "}", 1)[0].strip()


class Terminus2Harness(Harness):
    name = NAME

    def __init__(self, profile: Profile) -> None:
        if profile.harness != NAME:
            raise ProfileError(
                f"{profile.path or 'profile'} is a {profile.harness!r} profile, not {NAME!r}"
            )
        self.profile = profile
        self.variant = profile.variant or "json"
        profile.check(required_texts(self.variant))
        texts = {
            k.removeprefix("parser."): v
            for k, v in profile.texts.items()
            if k.startswith("parser.")
        }
        self.parser = JSONParser(texts) if self.variant == "json" else XMLParser(texts)
        self.max_bytes = int(profile.number("output_cap_bytes"))
        self.pane = (int(profile.number("pane_width")), int(profile.number("pane_height")))
        self.error_marker = _marker(profile.texts["feedback_error"], "error")
        self.warning_marker = _marker(profile.texts["feedback_warnings"], "warnings")
        if not self.error_marker or not self.warning_marker:
            raise ProfileError("the feedback forms must start with fixed words")
        summarizer = Summarizer(profile)
        self.summarizer = summarizer if summarizer.on else None

    # --- message forms ---

    def limit(self, output: str) -> str:
        """Harbor's output cap: at most max_bytes of UTF-8, half from the head, half from the
        tail (cut characters dropped), with the profile's marker between."""
        data = output.encode("utf-8")
        if len(data) <= self.max_bytes:
            return output
        half = self.max_bytes // 2
        head = data[:half].decode("utf-8", errors="ignore")
        tail = data[-half:].decode("utf-8", errors="ignore")
        omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
        return self.profile.text(
            "output_limited", head=head, tail=tail, max_bytes=self.max_bytes, omitted_bytes=omitted
        )

    def initial_screen(self) -> str:
        return INITIAL_PROMPT_LINE + "\n" * self.pane[1]

    def first_prompt(self, instruction: str, terminal_state: str) -> str:
        return self.profile.text(
            "first_prompt", instruction=instruction, terminal_state=self.limit(terminal_state)
        )

    def first_messages(self, instruction: str) -> list[dict[str, Any]]:
        state = self.profile.text("screen", screen=self.initial_screen())
        return [{"role": "user", "content": self.first_prompt(instruction, state)}]

    def feedback(self, result: ParseResult) -> str:
        p = self.profile
        if result.error:
            if result.warning:
                return p.text(
                    "feedback_error_warnings", error=result.error, warnings=result.warning
                )
            return p.text("feedback_error", error=result.error)
        if result.warning:
            return p.text("feedback_warnings", warnings=result.warning)
        return ""

    def output_length_message(self, truncated_reply: str, max_tokens: int) -> str:
        warnings = ""
        try:
            warnings = self.parser.parse_response(truncated_reply).warning
        except Exception:  # Harbor ignores a parser failure here too
            warnings = ""
        if warnings:
            return self.profile.text(
                "output_length_warnings", max_tokens=max_tokens, warnings=warnings
            )
        return self.profile.text("output_length", max_tokens=max_tokens)

    def summarize_below_free_tokens(self) -> int | None:
        if self.summarizer is None:
            return None
        return self.summarizer.threshold or None

    def session(self, *, max_tokens: int = 4096) -> Terminus2Session:
        return Terminus2Session(self, max_tokens=max_tokens)


class IncrementalOutput:
    """The terminal output since the previous look, found as Harbor's tmux session finds it."""

    def __init__(self, harness: Terminus2Harness) -> None:
        self.h = harness
        self.previous: str | None = None

    async def _capture(self, terminal: Terminal, *, entire: bool) -> str:
        text = await terminal.capture(entire=entire)
        return text or ""

    async def get(self, terminal: Terminal, log: str = "") -> str:
        p = self.h.profile
        current = await terminal.capture(entire=True)
        if current is None and log.strip():
            # Our terminal's own log, when the pane cannot be read at all (not in Harbor).
            return p.text("new_output", output=log)
        current = current or ""
        if self.previous is None:
            self.previous = current
            return p.text("screen", screen=await self._capture(terminal, entire=False))
        before = self.previous.strip()
        new: str | None = None
        if before in current:
            idx = current.index(before)
            if "\n" in before:
                idx = before.rfind("\n")
            new = current[idx:]
        self.previous = current
        if new is not None and new.strip():
            return p.text("new_output", output=new)
        return p.text("screen", screen=await self._capture(terminal, entire=False))


class Terminus2Session(HarnessSession):
    def __init__(self, harness: Terminus2Harness, *, max_tokens: int) -> None:
        self.h = harness
        self.max_tokens = max_tokens
        self.pending_completion = False
        self.output = IncrementalOutput(harness)

    async def start(self, terminal: Terminal) -> None:
        await terminal.send_keys("", 0.0)  # the terminal session starts on first use
        await terminal.resize(*self.h.pane)
        self.output.previous = (await terminal.capture(entire=True)) or ""

    async def execute(self, commands: list[Command], terminal: Terminal) -> tuple[bool, str]:
        h = self.h
        log = []
        for command in commands:
            try:
                log.append(await terminal.send_keys(command.keystrokes, command.duration))
            except TimeoutError:
                state = h.limit(await self.output.get(terminal, "".join(log)))
                message = h.profile.text(
                    "timeout",
                    timeout_sec=command.duration,
                    command=command.keystrokes,
                    terminal_state=state,
                )
                return True, message
        return False, h.limit(await self.output.get(terminal, "".join(log)))

    async def step(self, reply: str, terminal: Terminal, *, truncated: bool = False) -> Step:
        h = self.h
        if truncated:
            if isinstance(h.parser, XMLParser) and h.parser.salvage(reply) is not None:
                return Step(
                    done=True,
                    note="terminus-2 salvages this cut XML reply and then fails on it: episode "
                    "ended",
                )
            message = h.output_length_message(reply, self.max_tokens)
            return Step(messages=[{"role": "user", "content": message}])
        result = h.parser.parse_response(reply)
        feedback = h.feedback(result)
        if feedback and h.error_marker in feedback:
            return Step(
                messages=[
                    {"role": "user", "content": h.profile.text("parse_error", feedback=feedback)}
                ]
            )
        commands = [Command(c.keystrokes, min(c.duration, MAX_DURATION_S)) for c in result.commands]
        _, terminal_output = await self.execute(commands, terminal)
        if result.is_task_complete:
            if self.pending_completion:
                return Step(done=True, commands=commands)
            self.pending_completion = True
            observation = h.profile.text("confirmation", terminal_output=terminal_output)
        else:
            self.pending_completion = False
            if feedback and h.warning_marker in feedback:
                observation = h.profile.text(
                    "warnings", feedback=feedback, terminal_output=h.limit(terminal_output)
                )
            else:
                observation = h.limit(terminal_output)
        return Step(messages=[{"role": "user", "content": observation}], commands=commands)
