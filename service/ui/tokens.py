"""The text of each token, for the token view (POST /ui/api/tokens): id -> the token's text.

Where it comes from:
- `TokenizerFiles`: a byte-level BPE tokenizer's own files (`rollouts view --tokenizer PATH`: a
  tokenizer.json, a vocab.json, or a folder with either), read once; each id's bytes are
  exact, so a token that is not whole UTF-8 characters (byte-level BPE cuts characters) is
  also given with those bytes written \\xNN;
- `PolicyServerTexts`: the policy server's POST /detokenize (the service), which decodes a
  list of ids into one string (shared/vllm-wire/detokenize.json). The ids are sent in one call
  with a separator between every two, and the answer is cut at the separators: the decoder
  turns bytes cut from their character into U+FFFD at each separator, as it would for the
  token alone, so each piece is that token's own text. A piece count that does not add up (a
  token whose text holds the separator) is resolved by halving the batch down to that token;
  The separator must come back from /detokenize as itself or it is not used. Checked against a
  real vLLM 0.32 for every Qwen3 id (tests/e2e/test_real_vllm.py);
- `NoTokenTexts`: neither; the view shows ids and says why.

A source never fails the route: a policy server that does not answer gives ids and a note.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Protocol

from service.ui.models import MAX_TOKEN_ID, TokenTexts

log = logging.getLogger(__name__)

# What the policy server is given to answer in: a slow or paused server gives ids, not a wait.
POLICY_TIMEOUT_S = 15.0
# Between every two ids sent to /detokenize: the ASCII unit separator, which no tokenizer
# merges into text tokens in practice (checked on every answer anyway).
SEPARATOR = "\x1f"


class TokenTextSource(Protocol):
    label: str

    async def texts(self, ids: list[int]) -> TokenTexts: ...


class TokenizerError(ValueError):
    """Tokenizer files that are missing, unreadable or not a byte-level BPE tokenizer."""


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: each byte as the printable character byte-level BPE vocabularies spell
    it with (the printable Latin-1 bytes as themselves, the others from U+0100 on)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


_BYTE_OF = {c: b for b, c in _bytes_to_unicode().items()}


def _vocab_bytes(token: str) -> bytes:
    """A vocabulary entry's bytes. An entry with a character outside the table is its own
    UTF-8 (what the `tokenizers` ByteLevel decoder does)."""
    try:
        return bytes(_BYTE_OF[c] for c in token)
    except KeyError:
        return token.encode("utf-8")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise TokenizerError(f"{path}: {e}") from e


def _byte_level(decoder: Any) -> bool:
    if not isinstance(decoder, dict):
        return False
    if decoder.get("type") == "ByteLevel":
        return True
    return decoder.get("type") == "Sequence" and any(
        _byte_level(d) for d in decoder.get("decoders") or []
    )


class TokenizerFiles:
    """A byte-level BPE tokenizer's vocabulary, as bytes per id.

    `path`: a tokenizer.json; a vocab.json (GPT-2 layout, with the added tokens of a
    tokenizer_config.json or added_tokens.json beside it); or a folder holding either
    (tokenizer.json first)."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        if path.is_dir():
            names = ("tokenizer.json", "vocab.json")
            found = next((path / n for n in names if (path / n).is_file()), None)
            if found is None:
                raise TokenizerError(f"{path}: no tokenizer.json or vocab.json in this folder")
            path = found
        elif not path.is_file():
            raise TokenizerError(f"{path}: no such file or folder")
        self.path = path
        self.label = f"tokenizer {path}"
        self._bytes: dict[int, bytes] = {}
        if path.name == "vocab.json":
            self._read_vocab_json(path)
        else:
            self._read_tokenizer_json(path)
        if not self._bytes:
            raise TokenizerError(f"{path}: an empty vocabulary")

    def _add(self, vocab: Any, where: Path) -> None:
        if not isinstance(vocab, dict):
            raise TokenizerError(f"{where}: the vocabulary is not an object of token -> id")
        for token, i in vocab.items():
            if isinstance(token, str) and isinstance(i, int) and 0 <= i <= MAX_TOKEN_ID:
                self._bytes[i] = _vocab_bytes(token)

    def _added(self, items: list[tuple[Any, Any]]) -> None:
        """Added tokens (special ones and the like of <think>): their text as written."""
        for i, content in items:
            if isinstance(content, str) and isinstance(i, int) and 0 <= i <= MAX_TOKEN_ID:
                self._bytes[i] = content.encode("utf-8")

    def _read_tokenizer_json(self, path: Path) -> None:
        data = _read_json(path)
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "BPE":
            kind = model.get("type") if isinstance(model, dict) else None
            raise TokenizerError(f"{path}: not a BPE tokenizer (model type {kind!r})")
        if not _byte_level(data.get("decoder")):
            raise TokenizerError(
                f"{path}: not a byte-level BPE tokenizer (no ByteLevel decoder); the token view "
                "reads byte-level vocabularies only"
            )
        self._add(model.get("vocab"), path)
        added = data.get("added_tokens") or []
        self._added([(t.get("id"), t.get("content")) for t in added if isinstance(t, dict)])

    def _read_vocab_json(self, path: Path) -> None:
        self._add(_read_json(path), path)
        config = path.with_name("tokenizer_config.json")
        if config.is_file():
            decoder = _read_json(config).get("added_tokens_decoder") or {}
            self._added(
                [(int(i), t.get("content")) for i, t in decoder.items()
                 if str(i).isdigit() and isinstance(t, dict)]
            )  # fmt: skip
        added = path.with_name("added_tokens.json")
        if added.is_file():
            self._added([(i, t) for t, i in (_read_json(added) or {}).items()])

    def token_bytes(self, token_id: int) -> bytes | None:
        return self._bytes.get(token_id)

    async def texts(self, ids: list[int]) -> TokenTexts:
        texts: dict[int, str] = {}
        partial: dict[int, str] = {}
        missing = 0
        for i in ids:
            data = self._bytes.get(i)
            if data is None:
                missing += 1
                continue
            texts[i] = data.decode("utf-8", errors="replace")
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                partial[i] = data.decode("utf-8", errors="backslashreplace")
        note = f"{missing} ids are not in this tokenizer's vocabulary" if missing else None
        return TokenTexts(source=self.label, note=note, texts=texts, partial=partial)


class Detokenizer(Protocol):
    """What PolicyServerTexts needs of the policy client (service/policy/client.py)."""

    async def tokenize_text(self, text: str) -> list[int]: ...
    async def detokenize(self, token_ids: list[int]) -> str: ...


class PolicyServerTexts:
    """Token texts from the policy server's /tokenize and /detokenize."""

    label = "the policy server (/detokenize)"

    def __init__(self, policy: Detokenizer, timeout_s: float = POLICY_TIMEOUT_S) -> None:
        self.policy = policy
        self.timeout_s = timeout_s
        self._separator: list[int] | None = None  # the separator's ids, once checked

    async def texts(self, ids: list[int]) -> TokenTexts:
        if not ids:
            return TokenTexts(source=self.label, note=None, texts={}, partial={})
        try:
            async with asyncio.timeout(self.timeout_s):
                texts = await self._pieces(await self._separator_ids(), ids)
        except Exception as e:  # noqa: BLE001 - any failure shows ids, never an error page
            self._separator = None  # asked again next time (the server may have changed)
            why = f"no answer in {self.timeout_s:g} s" if isinstance(e, TimeoutError) else str(e)
            log.info("token texts from the policy server: %s", why)
            return TokenTexts(
                source=None,
                note=f"the policy server could not detokenize ({why[:300]})",
                texts={},
                partial={},
            )
        return TokenTexts(source=self.label, note=None, texts=texts, partial={})

    async def _separator_ids(self) -> list[int]:
        if self._separator is None:
            sep = await self.policy.tokenize_text(SEPARATOR)
            back = await self.policy.detokenize(sep + sep) if sep else ""
            if back != SEPARATOR * 2:
                raise ValueError(f"its tokenizer does not give the separator back ({back!r})")
            self._separator = sep
        return self._separator

    async def _pieces(self, sep: list[int], ids: list[int]) -> dict[int, str]:
        """Each id's text: one /detokenize call of SEP id SEP id ... SEP, cut at SEP; halved
        towards the token at fault when the pieces do not add up."""
        sequence = list(sep)
        for i in ids:
            sequence += [i, *sep]
        parts = (await self.policy.detokenize(sequence)).split(SEPARATOR)
        if len(parts) == len(ids) + 2 and parts[0] == "" and parts[-1] == "":
            return dict(zip(ids, parts[1:-1], strict=True))
        if len(ids) == 1:  # its text holds the separator: asked alone
            return {ids[0]: await self.policy.detokenize(ids)}
        half = len(ids) // 2
        return {**await self._pieces(sep, ids[:half]), **await self._pieces(sep, ids[half:])}


class NoTokenTexts:
    """No tokenizer: ids only, with the reason."""

    label = "none"

    def __init__(self, note: str) -> None:
        self.note = note

    async def texts(self, ids: list[int]) -> TokenTexts:
        return TokenTexts(source=None, note=self.note, texts={}, partial={})
