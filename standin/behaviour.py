"""What the stand-in "model" says: a scripted terminal agent, in whichever harness it is given.

It reads its prompt back (detokenized), recognises the task by its instruction text in the first
user message, and infers where it is from its own earlier replies (the only assistant turns):
only replies that parsed as protocol objects count, so after a malformed or truncated reply
(answered with an error observation) it simply redoes that step.

It recognises the harness from the prompt and answers in its format (`detect_format`; the
formats are harness_formats.py's).

Script per sample:
  1. write the solution: with probability p_correct the oracle solve.sh, otherwise a plausible
     wrong solution (the function the instruction asks for, defined with a wrong body).
     A solve.sh whose reply fits in REPLY_SHARE of the request's max_tokens (counted with the
     stand-in tokenizer) is typed into bash as one heredoc. A longer one is appended to
     SOLVE_FILE in parts, one reply each, every part sized to that request's max_tokens; the
     next part starts where the parts in the earlier replies end. Parts are typed with the
     terminal's echo off, so observations do not repeat them. Then one reply runs the file;
  2. run a quick import check, with task_complete true;
  3. (asked to confirm) task_complete true, no commands.
In attack mode, step 0 types one adversarial command (attacks.py) first, then it goes on to the
check and completion without writing a solution (an attack may have planted its own solution.py).

A choice's seed is the request's plus its index, as vLLM seeds the choices of an n-sample
request: choice j of a request seeded s answers as the only choice of one seeded s + j. Its
draws (correct or wrong, and the lengths below) come from (stub seed, choice seed, task id), so
a seeded sample answers the same every time.

Long-tail episodes (`long_tail` > 0, the JSON harnesses): real episodes are long-tailed, a few
samples running many more turns and tokens than the median. Each sample draws its verbosity v
once, on its first turn, from a lognormal (median 1, sigma `long_tail`): every reply of it then
carries round(TAIL_WORDS x v) filler words of analysis (as many as fit), and it looks around for
min(MAX_EXPLORE, floor(v)) turns (a harmless command each) before the script. Later turns read v
back from the first reply's filler, so the sample stays as verbose as it began.
`verbose_words` instead gives every reply that many filler words (as many as fit), so that a
small context fills in a few turns.

Context summarization (a harness that rewrites its conversation, terminus-2's): the calls of a
summarization read as any prompt (the stand-in answers them with its next scripted reply, a text
like any other). The rewritten conversation opens with two user messages in a row (the first
prompt, then the questions request) and the questions as the first reply: the script restarts
after it (its history is the replies after the questions), so the sample redoes its steps in the
sandbox it still has, which the script's steps allow (each one rewrites what it writes).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from sandboxes.task import Task
from standin.attacks import ATTACKS
from standin.chat_template import Turn, parse_transcript
from standin.harness_formats import detect_format, protocol_reply, read_reply, render_reply
from standin.tokenizer import StubTokenizer

_HEREDOC_MARK = "__ROLLOUTS_STUB_EOF__"

# A reply (with its EOS) takes at most this share of the request's max_tokens; a longer oracle
# solution is written in parts.
REPLY_SHARE = 0.5
# Where a solution written in parts goes (/tmp is a writable tmpfs in every sandbox).
SOLVE_FILE = "/tmp/rollouts-standin-solve.sh"
# Longest line typed at once: without readline, the terminal's canonical mode keeps at most
# 4095 bytes of a line; longer lines are typed in pieces.
_PIECE_CHARS = 1000
# Typing parts: bash without line editing and the terminal without echo, so that the typed text
# is not echoed back into the observation; and back, before the script runs.
_QUIET = "set +o emacs +o vi 2>/dev/null; stty -echo; PS2=\n"
_LOUD = "stty echo; set -o emacs 2>/dev/null; PS2='> '\n"
_PIECE_RE = re.compile(
    rf"cat >>? {re.escape(SOLVE_FILE)} <<'{_HEREDOC_MARK}'\n(.*){_HEREDOC_MARK}\n"
    rf"(truncate -s -1 {re.escape(SOLVE_FILE)}\n)?",
    re.S,
)


# Long tail: filler words per reply at the median verbosity (~10 stand-in tokens each), and the
# most turns a sample spends looking around before its script.
TAIL_WORDS = 20
TAIL_FILLER = " Considering."
MAX_EXPLORE = 4
EXPLORE_PLAN = "Look around before writing anything."
_EXPLORE_COMMANDS = ("ls -la /app\n", "python3 --version\n", "ls /\n", "cat /etc/os-release\n")


@dataclass(frozen=True)
class BehaviourSettings:
    p_correct: float = 1.0
    p_malformed: float = 0.02
    seed: int = 0
    attack: str | None = None
    # Up to this many extra words of analysis per reply, drawn per sample and turn: the samples
    # of a group then differ in length and stop moving in step, as a real model's do.
    length_jitter: int = 0
    # Sigma of the lognormal of a sample's verbosity (long-tail episodes, see above); 0: off.
    long_tail: float = 0.0
    # Filler words in every reply (see above); 0: off. Not with long_tail.
    verbose_words: int = 0

    def __post_init__(self) -> None:
        for name in ("p_correct", "p_malformed"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {getattr(self, name)}")
        if self.verbose_words < 0 or (self.verbose_words and self.long_tail):
            raise ValueError("verbose_words must be >= 0, and not with long_tail")
        if self.length_jitter < 0:
            raise ValueError(f"length_jitter must be >= 0, got {self.length_jitter}")
        if not 0.0 <= self.long_tail <= 4.0:
            raise ValueError(f"long_tail must be within [0, 4], got {self.long_tail}")
        if self.attack is not None and self.attack not in ATTACKS:
            raise ValueError(f"attack: unknown {self.attack!r}; known: {', '.join(ATTACKS)}")


@dataclass(frozen=True)
class _Target:
    path: str  # the Python file the task wants, e.g. /app/solution.py
    function: str
    args: str


@dataclass(frozen=True)
class _Def:
    name: str
    args: str
    top_level: bool


_DEF_RE = re.compile(r"^([ \t]*)def\s+([A-Za-z_]\w*)\s*\(", re.M)


def _balanced(text: str, start: int) -> str | None:
    """The text from `start` up to the bracket closing one opened just before it."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def _defs(source: str) -> list[_Def]:
    out = []
    for m in _DEF_RE.finditer(source):
        args = _balanced(source, m.end())
        out.append(_Def(m.group(2), "*args, **kwargs" if args is None else args, not m.group(1)))
    return out


def _mention(name: str, instruction: str) -> tuple[int, int] | None:
    """How strongly the instruction names `name` (a call beats code quotes beats a bare word),
    and where first; None if it does not."""
    word = re.escape(name)
    for strength, pattern in (
        (3, rf"(?<![\w]){word}\s*\("),
        (2, rf"`[^`\n]*(?<![\w]){word}(?![\w])[^`\n]*`"),
        (1, rf"(?<![\w]){word}(?![\w])"),
    ):
        m = re.search(pattern, instruction)
        if m:
            return strength, m.start()
    return None


def _asked_function(solve: str, instruction: str) -> tuple[str, str]:
    """(name, args) of the function the task asks for: of the functions solve.sh defines, the
    one the instruction names (helpers are often defined first); else a call the instruction
    shows; else the last public top-level def (the helpers come before it); else `solve`."""
    defs = _defs(solve)
    named = [(m, d) for d in defs if (m := _mention(d.name, instruction)) is not None]
    if named:
        # The strongest mention, then public names, then the first mentioned.
        _, best = max(named, key=lambda md: (md[0][0], not md[1].name.startswith("_"), -md[0][1]))
        return best.name, best.args
    call = re.search(r"`?([A-Za-z_]\w*)\(([^)]*)\)`?", instruction)
    public = [d for d in defs if d.top_level and not d.name.startswith("_")]
    if public:
        return public[-1].name, public[-1].args
    if call:
        return call.group(1), call.group(2)
    if defs:
        return defs[-1].name, defs[-1].args
    return "solve", "*args, **kwargs"


def _target(task: Task) -> _Target:
    solve = _solve_text(task)
    path_m = re.search(r"(/[\w./-]+\.py)\b", solve) or re.search(
        r"(/[\w./-]+\.py)\b", task.instruction
    )
    function, args = _asked_function(solve, task.instruction)
    return _Target(
        path=path_m.group(1) if path_m else "/app/solution.py", function=function, args=args
    )


def _solve_text(task: Task) -> str:
    solve = task.solution_files.get("solve.sh", b"").decode("utf-8", errors="replace")
    return solve if not solve or solve.endswith("\n") else solve + "\n"


def _keystrokes(reply: dict) -> list[str]:
    commands = reply.get("commands")
    if not isinstance(commands, list):
        return []
    return [
        c["keystrokes"]
        for c in commands
        if isinstance(c, dict) and isinstance(c.get("keystrokes"), str)
    ]


def _part_written(reply: dict) -> int | None:
    """How many characters of the solution this earlier reply appended to SOLVE_FILE; None if
    it is not a part of a solution written in parts."""
    sizes = []
    for keys in _keystrokes(reply):
        if m := _PIECE_RE.fullmatch(keys):
            sizes.append(len(m.group(1)) - (1 if m.group(2) else 0))
    return sum(sizes) if sizes else None


def _pieces(text: str) -> list[str]:
    """`text` as heredoc bodies: whole lines together, lines over _PIECE_CHARS cut in pieces."""
    pieces: list[str] = []
    run = ""
    for line in re.findall(r"[^\n]*\n|[^\n]+", text):
        if len(line) <= _PIECE_CHARS:
            run += line
            continue
        if run:
            pieces.append(run)
            run = ""
        pieces += [line[i : i + _PIECE_CHARS] for i in range(0, len(line), _PIECE_CHARS)]
    if run:
        pieces.append(run)
    return pieces


def _piece_keys(body: str, *, create: bool) -> str:
    """Append `body` to SOLVE_FILE with a heredoc; a body that does not end its line gets a
    newline for the heredoc, which `truncate` takes off again."""
    keys = f"cat {'>' if create else '>>'} {SOLVE_FILE} <<'{_HEREDOC_MARK}'\n{body}"
    if body.endswith("\n"):
        return f"{keys}{_HEREDOC_MARK}\n"
    return f"{keys}\n{_HEREDOC_MARK}\ntruncate -s -1 {SOLVE_FILE}\n"


class _Costs:
    """Estimated reply tokens of the characters of one solve.sh (per line, JSON-escaped), to
    size its parts without tokenizing candidate replies over and over."""

    def __init__(self, solve: str, tokenizer: StubTokenizer) -> None:
        self.starts = [0]
        self.cum = [0.0]  # tokens of solve[: starts[i]]
        for line in re.findall(r"[^\n]*\n|[^\n]+", solve):
            self.starts.append(self.starts[-1] + len(line))
            self.cum.append(self.cum[-1] + len(tokenizer.encode(json.dumps(line)[1:-1])))

    def at(self, pos: int) -> float:
        i = min(bisect_right(self.starts, pos) - 1, len(self.starts) - 2)
        if i < 0:
            return 0.0
        span = self.starts[i + 1] - self.starts[i]
        frac = (pos - self.starts[i]) / span if span else 0.0
        return self.cum[i] + frac * (self.cum[i + 1] - self.cum[i])

    def chars_within(self, offset: int, tokens: float) -> int:
        """The most characters from `offset` estimated to take at most `tokens` tokens."""
        base, lo, hi = self.at(offset), 0, self.starts[-1] - offset
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.at(offset + mid) - base <= tokens:
                lo = mid
            else:
                hi = mid - 1
        return lo


def _since_restart(turns: list[Turn]) -> list[Turn]:
    """The turns since the conversation was last rewritten by a summarization (two user
    messages in a row, then the questions reply): all of them when it never was."""
    for i in range(len(turns) - 2, 0, -1):
        if turns[i].role == "user" and turns[i - 1].role == "user":
            return turns[i + 2 :]
    return turns


def _seeded(*parts: object) -> int:
    """A 64-bit number fixed by `parts`: a seeded sample draws the same every time."""
    key = ":".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


class ScriptedAgent:
    def __init__(
        self,
        tasks: Iterable[Task],
        settings: BehaviourSettings,
        tokenizer: StubTokenizer | None = None,
    ) -> None:
        self.settings = settings
        self.tokenizer = tokenizer or StubTokenizer()
        # Longest instruction first, so a task whose instruction contains another's wins.
        self.tasks = sorted(tasks, key=lambda t: -len(t.instruction.strip()))
        self._whole_tokens: dict[str, int] = {}  # task id -> tokens of the one-reply solution
        self._costs: dict[str, _Costs] = {}

    def find_task(self, turns: list[Turn]) -> Task | None:
        first_user = next((t.content for t in turns if t.role == "user"), None)
        if first_user is None:
            return None
        for task in self.tasks:
            instr = task.instruction.strip()
            if instr and instr in first_user:
                return task
        return None

    def is_correct(self, task: Task, seed: int | None, rng: random.Random) -> bool:
        """`seed`: the choice's (see the module's doc)."""
        if seed is None:  # no sample seed: nothing to stay consistent with, draw afresh
            return rng.random() < self.settings.p_correct
        return _seeded(self.settings.seed, seed, task.id) / 2**64 < self.settings.p_correct

    def reply(
        self,
        prompt_text: str,
        *,
        seed: int | None,
        index: int,
        rng: random.Random,
        max_tokens: int | None = None,
    ) -> str:
        """The full scripted reply text (without EOS) for this prompt, as choice `index` of a
        request seeded `seed`. With `max_tokens` (the request's), the reply and its EOS take at
        most REPLY_SHARE of it where it can."""
        seed = None if seed is None else seed + index  # the choice's own, as vLLM's
        turns = parse_transcript(prompt_text)
        fmt = detect_format(turns)
        task = self.find_task(turns)
        if task is None:
            return render_reply(
                protocol_reply("I do not recognise this task.", "Stop here.", [], True), fmt
            )
        # Closed assistant turns only: the last, open one is the generation prompt.
        history = [
            obj
            for t in _since_restart(turns)
            if t.role == "assistant" and t.closed and (obj := read_reply(t.content, fmt))
        ]
        budget = None if max_tokens is None else max(1, int(max_tokens * REPLY_SHARE))
        correct = self.is_correct(task, seed, rng)
        filler = self._tail_words(task, seed, history, rng)
        explored = 0
        while explored < len(history) and history[explored].get("plan") == EXPLORE_PLAN:
            explored += 1
        looks = min(MAX_EXPLORE, filler // TAIL_WORDS) if self.settings.long_tail else 0
        if explored < looks and explored == len(history):
            raw = self._explore(explored)
        else:
            raw = self._next(task, correct, history[explored:], budget)
        words = self._jitter_words(task, seed, len(history), rng)
        if words:
            obj = json.loads(raw)
            obj["analysis"] += " Thinking." * words
            padded = json.dumps(obj)
            if budget is None or self._tokens(padded) <= budget:
                raw = padded
        if filler:
            raw = self._padded(raw, filler, budget)
        text = render_reply(raw, fmt)
        # Cut strictly inside the reply (for tool calls: inside the first call, or a cut answer
        # would read as the final one): the harness cannot use it, and the step is redone.
        start = 1 if fmt != "tools" else text.find("<tool_call>") + 1
        if start > 0 and len(text) - 1 > start and rng.random() < self.settings.p_malformed:
            text = text[: rng.randrange(start, len(text) - 1)]
        return text

    def _jitter_words(self, task: Task, seed: int | None, turn: int, rng: random.Random) -> int:
        n = self.settings.length_jitter
        if n == 0:
            return 0
        if seed is None:
            return rng.randint(0, n)
        return _seeded("jitter", self.settings.seed, seed, task.id, turn) % (n + 1)

    def _tail_words(
        self, task: Task, seed: int | None, history: list[dict], rng: random.Random
    ) -> int:
        """The sample's filler words per reply: drawn on its first turn, read back later."""
        sigma = self.settings.long_tail
        if sigma == 0:
            return self.settings.verbose_words
        if history:
            analysis = history[0].get("analysis")
            return analysis.count(TAIL_FILLER) if isinstance(analysis, str) else 0
        if seed is None:
            z = rng.gauss(0.0, 1.0)
        else:
            z = random.Random(_seeded("tail", self.settings.seed, seed, task.id)).gauss(0.0, 1.0)
        return round(TAIL_WORDS * math.exp(sigma * z))

    def _padded(self, raw: str, words: int, budget: int | None) -> str:
        """`raw` with `words` filler words of analysis, or as many as fit in `budget`."""
        obj = json.loads(raw)
        if budget is not None:
            room = budget - self._tokens(raw) - 1
            words = min(words, max(0, room) // len(self.tokenizer.encode(TAIL_FILLER)))
        obj["analysis"] += TAIL_FILLER * words
        return json.dumps(obj)

    def _explore(self, step: int) -> str:
        command = _EXPLORE_COMMANDS[step % len(_EXPLORE_COMMANDS)]
        return protocol_reply(
            f"Before writing the solution I want to see the environment (step {step + 1}).",
            EXPLORE_PLAN,
            [(command, 0.5)],
            False,
        )

    def _tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) + 1  # and the EOS

    def _next(self, task: Task, correct: bool, history: list[dict], budget: int | None) -> str:
        tgt = _target(task)
        done, pos = len(history), 0
        if self.settings.attack is not None:
            if done == 0:
                return protocol_reply(
                    "Let me look around the environment first.",
                    "Run a command.",
                    [(ATTACKS[self.settings.attack], 5.0)],
                    False,
                )
            pos, correct = 1, False
        if correct and task.has_oracle:
            solve = _solve_text(task)
            written, parts = 0, 0
            while pos < done and (n := _part_written(history[pos])) is not None:
                written, parts, pos = written + n, parts + 1, pos + 1
            if pos == done:
                if parts == 0:
                    whole = self._whole(tgt, solve)
                    if budget is None or self._whole_size(task, whole) <= budget:
                        return whole
                if written < len(solve):
                    return self._part(task, solve, written, budget)
                return protocol_reply(
                    f"All {len(solve)} characters of the solution script are in {SOLVE_FILE}.",
                    "Turn the terminal echo back on and run the script.",
                    [(_LOUD, 0.1), (f"bash {SOLVE_FILE}\n", 1.0)],
                    False,
                )
            pos += 1  # the solution typed whole, or the run of the file written in parts
        elif self.settings.attack is None:
            if pos == done:
                return self._wrong(tgt)
            pos += 1
        folder = tgt.path.rsplit("/", 1)[0] or "/"
        module = tgt.path.rsplit("/", 1)[-1].removesuffix(".py")
        if pos == done:
            check = f"cd {folder} && python3 -c \"import {module}; print('ok')\"\n"
            return protocol_reply(
                "The solution file is written.",
                "Check that it imports, then finish.",
                [(check, 1.0)],
                True,
            )
        return protocol_reply("The solution is in place and imports cleanly.", "Confirm.", [], True)

    def _whole(self, tgt: _Target, solve: str) -> str:
        keys = f"bash <<'{_HEREDOC_MARK}'\n{solve}{_HEREDOC_MARK}\n"
        analysis = f"The task asks for {tgt.function} in {tgt.path}. I know how to write it."
        return protocol_reply(analysis, f"Write {tgt.path}.", [(keys, 1.0)], False)

    def _whole_size(self, task: Task, whole: str) -> int:
        if task.id not in self._whole_tokens:
            self._whole_tokens[task.id] = self._tokens(whole)
        return self._whole_tokens[task.id]

    def _wrong(self, tgt: _Target) -> str:
        folder = tgt.path.rsplit("/", 1)[0] or "/"
        body = f"def {tgt.function}({tgt.args}):\n    return None\n"
        keys = f"mkdir -p {folder} && cat > {tgt.path} <<'{_HEREDOC_MARK}'\n{body}{_HEREDOC_MARK}\n"
        analysis = f"The task asks for {tgt.function} in {tgt.path}. I will write a first version."
        return protocol_reply(analysis, f"Write {tgt.path}.", [(keys, 1.0)], False)

    def _part_reply(self, solve: str, offset: int, size: int) -> str:
        end = offset + size
        commands = [(_QUIET, 0.1)]
        for i, body in enumerate(_pieces(solve[offset:end])):
            commands.append((_piece_keys(body, create=offset == 0 and i == 0), 1.0))
        return protocol_reply(
            f"The solution script is too long for one reply: characters {offset} to {end} of "
            f"{len(solve)} go into {SOLVE_FILE} now.",
            "Append this part with the echo off; run the script once it is complete.",
            commands,
            False,
        )

    def _part(self, task: Task, solve: str, offset: int, budget: int | None) -> str:
        """The next part from `offset`: as long as fits in `budget` tokens, ending a line where
        it can."""
        rest = len(solve) - offset
        if budget is None:
            return self._part_reply(solve, offset, rest)
        if task.id not in self._costs:
            self._costs[task.id] = _Costs(solve, self.tokenizer)
        overhead = self._tokens(self._part_reply(solve, offset, 0))
        size = self._costs[task.id].chars_within(offset, 0.9 * (budget - overhead))
        size = max(1, min(rest, size))
        while True:
            if offset + size < len(solve):
                line_end = solve.rfind("\n", offset, offset + size)
                if line_end >= offset:
                    size = line_end + 1 - offset
            text = self._part_reply(solve, offset, size)
            if size == 1 or self._tokens(text) <= budget:
                return text
            size = max(1, int(size * 0.85))
