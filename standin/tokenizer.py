"""The stand-in server's tokenizer: small, deterministic and byte-exact.

Vocabulary: three special tokens (the Qwen ones the chat template uses), one token per byte (so any
text round-trips exactly), then a few hundred multi-byte "merges" of common strings. Encoding is
greedy longest-match over UTF-8 bytes, so, as with real BPE, tokenizing a concatenation can differ
from concatenating tokenizations; tests of token exactness need that property to mean anything.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from functools import cached_property

ENDOFTEXT_ID = 0
IM_START_ID = 1
IM_END_ID = 2  # the EOS of the chat model
EOS_ID = IM_END_ID
SPECIAL_TOKENS: dict[str, int] = {
    "<|endoftext|>": ENDOFTEXT_ID,
    "<|im_start|>": IM_START_ID,
    "<|im_end|>": IM_END_ID,
}
BYTE_OFFSET = len(SPECIAL_TOKENS)  # id of byte b is BYTE_OFFSET + b

_PY_KEYWORDS = (
    "def class return import from if elif else for while in not and or is None True False try "
    "except finally raise with as lambda yield pass break continue global assert del self print "
    "len range str int float list dict set tuple isinstance enumerate zip sorted map open"
).split()
_WORDS = (
    "the a an to of and is are be it this that with for on at by we I you will then first "
    "solution function file test tests task write create check run runs command output error "
    "install python python3 bash cat echo ls cd mkdir rm cp mv grep sed head tail pytest import "
    "app module value values result string number list input return returns should must "
    "implement implemented defining define written complete done now confirm looks good ok "
    "terminal agent reply JSON object instruction given following example examples expected "
    "name names path line lines text data type types empty case cases camel snake upper lower "
    "split join strip replace format sum count max min sort key keys items append extend"
).split()
_FRAGMENTS = [
    # terminus-2 JSON protocol
    '{"analysis": "',
    '", "plan": "',
    '", "commands": [',
    '"commands": [',
    '{"keystrokes": "',
    '", "duration": ',
    '"task_complete": ',
    ', "task_complete": ',
    "], ",
    "}], ",
    "true}",
    "false}",
    '"analysis"',
    '"plan"',
    '"keystrokes"',
    '"duration"',
    '"task_complete"',
    '": "',
    '", "',
    "\\n",
    '\\"',
    "\\\\",
    # chat template
    "system\n",
    "user\n",
    "assistant\n",
    "system",
    "user",
    "assistant",
    # shell and files
    "cat > ",
    "<<'EOF'",
    "EOF\n",
    "EOF",
    "/app/",
    "/app",
    "solution.py",
    ".py",
    "python3 -c ",
    "#!/bin/bash",
    "set -e",
    "&& ",
    " > ",
    " >> ",
    " | ",
    "/tmp/",
    "/logs/",
    "/tests/",
    "print('ok')",
    "import solution",
    "$ ",
    "():",
    "(s):",
    "(self",
    "(x)",
    "(s)",
    "):\n",
    "):",
    "()",
    "[]",
    "{}",
    "==",
    "!=",
    "<=",
    ">=",
    "+=",
    "->",
    "''",
    '""',
    "#",
    "# ",
    ", ",
    ". ",
    ": ",
    "0.",
    "1.0",
    "0.1",
    "0.5",
    # whitespace runs
    "\n\n",
    "\n    ",
    "\n        ",
    "  ",
    "    ",
    "        ",
    "                ",
    "\t",
]


def _build_merges() -> list[bytes]:
    pieces: list[str] = list(_FRAGMENTS)
    for w in (*_PY_KEYWORDS, *_WORDS):
        pieces += [w, " " + w, w.capitalize(), " " + w.capitalize()]
    seen: set[bytes] = set()
    merges: list[bytes] = []
    for p in pieces:
        b = p.encode()
        if len(b) >= 2 and b not in seen:
            seen.add(b)
            merges.append(b)
    return merges


_SPECIAL_RE = re.compile("|".join(re.escape(s) for s in SPECIAL_TOKENS))


class StubTokenizer:
    """Greedy longest-match tokenizer with byte fallback. Stateless; safe to share."""

    def __init__(self) -> None:
        merges = _build_merges()
        self.id_to_bytes: list[bytes] = [s.encode() for s in SPECIAL_TOKENS]
        self.id_to_bytes += [bytes([b]) for b in range(256)]
        self.id_to_bytes += merges
        self._merge_ids = {m: BYTE_OFFSET + 256 + i for i, m in enumerate(merges)}
        # Candidates by first byte, longest first, so the first match is the longest.
        self._by_first: dict[int, list[tuple[bytes, int]]] = {}
        for m, i in self._merge_ids.items():
            self._by_first.setdefault(m[0], []).append((m, i))
        for cands in self._by_first.values():
            cands.sort(key=lambda c: -len(c[0]))

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_bytes)

    @cached_property
    def special_ids(self) -> frozenset[int]:
        return frozenset(SPECIAL_TOKENS.values())

    def encode(self, text: str) -> list[int]:
        """Special tokens in `text` are always recognised (as HF tokenizers do by default)."""
        out: list[int] = []
        pos = 0
        for m in _SPECIAL_RE.finditer(text):
            out += self._encode_bytes(text[pos : m.start()].encode())
            out.append(SPECIAL_TOKENS[m.group()])
            pos = m.end()
        out += self._encode_bytes(text[pos:].encode())
        return out

    def _encode_bytes(self, data: bytes) -> list[int]:
        out: list[int] = []
        i, n = 0, len(data)
        while i < n:
            for m, tid in self._by_first.get(data[i], ()):
                if data.startswith(m, i):
                    out.append(tid)
                    i += len(m)
                    break
            else:
                out.append(BYTE_OFFSET + data[i])
                i += 1
        return out

    def check_ids(self, ids: Iterable[int]) -> int | None:
        """The first id outside the vocabulary, or None."""
        for t in ids:
            if not 0 <= t < self.vocab_size:
                return t
        return None

    def token_bytes(self, token_id: int) -> bytes:
        return self.id_to_bytes[token_id]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """Invalid UTF-8 decodes with U+FFFD replacement characters, as vLLM does."""
        data = b"".join(
            self.id_to_bytes[t] for t in ids if not (skip_special_tokens and t in self.special_ids)
        )
        return data.decode("utf-8", errors="replace")

    def token_str(self, token_id: int) -> str:
        """One token shown on its own (logprobs `tokens`): partial UTF-8 becomes U+FFFD."""
        return self.id_to_bytes[token_id].decode("utf-8", errors="replace")

    def incremental_decoder(self) -> codecs.IncrementalDecoder:
        return codecs.getincrementaldecoder("utf-8")(errors="replace")
