"""The token view's texts, POST /ui/api/tokens (service/ui/tokens.py), over real HTTP:

- `rollouts view --tokenizer`: the real Qwen3 tokenizer files (../shared/qwen3-tokenizer, or
  ROLLOUTS_QWEN3_TOKENIZER), as vocab.json and as a tokenizer.json: each id's exact text,
  special and added tokens as written, the bytes of a character cut in two written \\xNN;
- the service: the policy server's /detokenize (the stand-in behind a real PolicyClient), one
  call for many ids, exact even for the separator's own id and for bytes cut from their
  character; a policy server that fails or hangs gives ids and a note, never an error;
- the input: bad ids are a 422 naming `ids`, and a call takes at most MAX_TOKEN_IDS of them.

The Qwen3 ids below were checked against transformers 5.19's AutoTokenizer on the same files
(every one of the 151,669 ids decodes alone to the text TokenizerFiles gives).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.components import Components, settings_task_loader
from service.policy.client import PolicyClient
from service.settings import Settings
from service.ui.models import MAX_TOKEN_IDS
from service.ui.sources import StoreSource
from service.ui.tokens import SEPARATOR, PolicyServerTexts, TokenizerError, TokenizerFiles
from service.ui.viewer import create_view_app
from standin.engine import StubSettings
from standin.server import build_app
from standin.tokenizer import BYTE_OFFSET, StubTokenizer
from tests.ci import unavailable
from tests.unit.test_api import AUTH, GatedRunner, make_settings
from tests.unit.test_ui_api import generate_store

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = Path(os.environ.get("ROLLOUTS_QWEN3_TOKENIZER", ROOT.parent / "shared" / "qwen3-tokenizer"))

# Qwen3 ids and their texts: "<|im_start|>user\nhi<|im_end|>\n", "hello world", "\n\n",
# "<think>", a tab, and "🦜" (F0 9F A6 9C), which byte-level BPE cuts into F0 9F A6 + 9C.
QWEN3_TEXTS = {
    151644: "<|im_start|>", 872: "user", 198: "\n", 6023: "hi", 151645: "<|im_end|>",
    14990: "hello", 1879: " world", 271: "\n\n", 151667: "<think>", 197: "\t",
    123918: "\ufffd", 250: "\ufffd",
}  # fmt: skip
QWEN3_PARTIAL = {123918: "\\xf0\\x9f\\xa6", 250: "\\x9c"}
NOT_IN_QWEN3 = 151_700  # past the vocabulary (151,669 tokens; the model's rows go to 151,935)


@pytest.fixture(scope="module")
def qwen3() -> Path:
    if not (QWEN3 / "vocab.json").is_file():
        unavailable(f"no Qwen3 tokenizer files at {QWEN3} (ROLLOUTS_QWEN3_TOKENIZER)")
    return QWEN3


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("store")
    generate_store(data, "r1", n_groups=1, n_samples=2)
    return data


def _view(store: Path, tokens: object = None) -> TestClient:
    app = create_view_app(StoreSource(store, "test"), tokens)  # type: ignore[arg-type]
    return TestClient(app, base_url="http://localhost")


def _tokenizer_json(qwen3: Path, out: Path, decoder: dict | None = None) -> Path:
    """The same vocabulary in tokenizer.json's layout (what save_pretrained writes)."""
    vocab = json.loads((qwen3 / "vocab.json").read_text())
    config = json.loads((qwen3 / "tokenizer_config.json").read_text())
    added = [{"id": int(i), "content": t["content"], "special": t["special"]}
             for i, t in config["added_tokens_decoder"].items()]  # fmt: skip
    data = {
        "version": "1.0",
        "added_tokens": added,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
        "decoder": decoder or {"type": "ByteLevel", "add_prefix_space": True},
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(data))
    return out / "tokenizer.json"


def _ask(c: TestClient, ids: object, **kw: object) -> httpx.Response:
    return c.post("/ui/api/tokens", json={"ids": ids}, **kw)  # type: ignore[arg-type]


def _check_qwen3(body: dict) -> None:
    assert {int(k): v for k, v in body["texts"].items()} == QWEN3_TEXTS
    assert {int(k): v for k, v in body["partial"].items()} == QWEN3_PARTIAL
    assert body["note"] == "1 ids are not in this tokenizer's vocabulary"


@pytest.mark.parametrize("layout", ["folder", "vocab.json", "tokenizer.json"])
def test_the_view_gives_each_token_its_exact_text_from_tokenizer_files(
    qwen3: Path, store: Path, tmp_path: Path, layout: str
) -> None:
    path = {
        "folder": qwen3,
        "vocab.json": qwen3 / "vocab.json",
        "tokenizer.json": _tokenizer_json(qwen3, tmp_path / "tok"),
    }[layout]
    with _view(store, TokenizerFiles(path)) as c:
        ids = [*QWEN3_TEXTS, NOT_IN_QWEN3, 198, 198]  # repeats are answered once
        r = _ask(c, ids)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["source"].startswith("tokenizer ") and str(path.name) in body["source"]
        _check_qwen3(body)
        assert _ask(c, []).json()["texts"] == {}


def test_tokenizer_files_that_are_not_byte_level_bpe_are_refused(
    qwen3: Path, tmp_path: Path
) -> None:
    metaspace = {"type": "Metaspace", "replacement": "\u2581"}
    with pytest.raises(TokenizerError, match="not a byte-level BPE"):
        TokenizerFiles(_tokenizer_json(qwen3, tmp_path / "sp", decoder=metaspace))
    (tmp_path / "wp").mkdir()
    (tmp_path / "wp" / "tokenizer.json").write_text('{"model": {"type": "WordPiece"}}')
    with pytest.raises(TokenizerError, match="not a BPE tokenizer"):
        TokenizerFiles(tmp_path / "wp")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerError, match="no tokenizer.json or vocab.json"):
        TokenizerFiles(tmp_path / "empty")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TokenizerError, match="bad.json"):
        TokenizerFiles(tmp_path / "bad.json")


def test_rollouts_view_checks_its_tokenizer_before_serving(store: Path, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from clients.commands import view

    app = typer.Typer()
    view.register(app)
    app.command("other")(lambda: None)  # two commands: `view` is named on the command line
    args = ["view", "--data-dir", str(store), "--tokenizer", str(tmp_path / "missing")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--tokenizer" in result.output and "no such file or folder" in result.output


def test_without_a_tokenizer_the_view_answers_ids_and_says_how_to_get_texts(store: Path) -> None:
    with _view(store) as c:
        body = _ask(c, [1, 2, 3]).json()
        assert body["source"] is None and body["texts"] == {} and body["partial"] == {}
        assert "--tokenizer" in body["note"]


@pytest.mark.parametrize(
    "ids",
    [[-1], ["7"], [1.5], [True], [2**31], "1,2", None, list(range(MAX_TOKEN_IDS + 1))],
)
def test_bad_ids_are_a_422_naming_the_field(store: Path, ids: object) -> None:
    with _view(store) as c:
        r = _ask(c, ids)
        assert r.status_code == 422, r.text
        assert all(d["loc"][:2] == ["body", "ids"] for d in r.json()["detail"]), r.text
        assert _ask(c, list(range(MAX_TOKEN_IDS))).status_code == 200
        r = c.post("/ui/api/tokens", json={"ids": [1], "text": "x"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "text"]


# ---------------------------------------------------------------- the policy server


class Recorder(httpx.AsyncBaseTransport):
    """The stand-in policy server in process, with each request's path and body kept."""

    def __init__(self) -> None:
        self.inner = httpx.ASGITransport(app=build_app(StubSettings(p_malformed=0.0)))
        self.requests: list[tuple[str, dict]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.requests.append((request.url.path, json.loads(request.content)))
        return await self.inner.handle_async_request(request)


def _policy(transport: httpx.AsyncBaseTransport) -> PolicyClient:
    return PolicyClient(["http://policy"], max_retries=0, backoff_s=0.01, transport=transport)


STUB = StubTokenizer()
# Text tokens and merges, the specials, the separator's own byte, a byte cut from its
# character (0xE4: the first of three) and a continuation byte alone.
STUB_IDS = [
    *STUB.encode("<|im_start|>assistant\ndef f():\n    return 'ü'<|im_end|>"),
    BYTE_OFFSET + ord(SEPARATOR), BYTE_OFFSET + 0xE4, BYTE_OFFSET + 0x9C,
]  # fmt: skip


async def test_texts_from_the_policy_servers_detokenize_in_one_call() -> None:
    recorder = Recorder()
    policy = _policy(recorder)
    await policy.start()
    recorder.requests.clear()
    try:
        source = PolicyServerTexts(policy)
        ids = list(dict.fromkeys(STUB_IDS))
        body = await source.texts(ids)
        assert body.source == "the policy server (/detokenize)" and body.note is None
        assert body.texts == {i: STUB.token_str(i) for i in ids}
        assert body.texts[BYTE_OFFSET + 0xE4] == "\ufffd" and "assistant\n" in body.texts.values()
        calls = [p for p, _ in recorder.requests]
        # The separator once (tokenize, check), one call for the ids, then the separator's own
        # id (its text splits the answer) found by halving and asked alone.
        assert calls[:3] == ["/tokenize", "/detokenize", "/detokenize"], calls
        assert len(calls) <= 4 + 2 * len(ids).bit_length(), calls
        # The shapes of vLLM's requests (shared/vllm-wire: tokenize_prompt.json, detokenize.json).
        tokenize, detokenize = recorder.requests[0][1], recorder.requests[2][1]
        assert tokenize["prompt"] == SEPARATOR and tokenize["add_special_tokens"] is False
        assert set(tokenize) == {"model", "prompt", "add_special_tokens"}
        assert set(detokenize) == {"model", "tokens"}
        assert len(detokenize["tokens"]) == 2 * len(ids) + 1  # SEP id SEP id ... SEP
        recorder.requests.clear()
        again = await source.texts([i for i in ids if i != BYTE_OFFSET + ord(SEPARATOR)])
        assert [p for p, _ in recorder.requests] == ["/detokenize"]  # the separator is kept
        assert again.texts == {i: t for i, t in body.texts.items() if i in again.texts}
    finally:
        await policy.aclose()


async def test_a_policy_server_that_fails_or_hangs_gives_ids_and_a_note() -> None:
    async def fail(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "boom", "type": "x", "code": 500}})

    async def hang(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200, json={})

    for handler, timeout_s, says in ((fail, 15.0, "HTTP 500: boom"), (hang, 0.3, "no answer")):
        policy = PolicyClient(
            ["http://policy"], "m", max_model_len=100, max_retries=0,
            transport=httpx.MockTransport(handler),
        )  # fmt: skip
        await policy.start()
        try:
            body = await PolicyServerTexts(policy, timeout_s=timeout_s).texts([1, 2])
        finally:
            await policy.aclose()
        assert body.source is None and body.texts == {}, body
        assert body.note is not None and body.note.startswith("the policy server could not")
        assert says in body.note, body.note


@pytest.fixture
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """The service's app (lifespan and all) whose policy client reaches the stand-in, or a
    server answering 500 (param "failing")."""
    failing = getattr(request, "param", None) == "failing"

    async def components(s: Settings, _version: object) -> Components:
        async def ready() -> bool:
            return True

        if failing:
            transport: httpx.AsyncBaseTransport = httpx.MockTransport(
                lambda _: httpx.Response(503, text="loading")
            )
            policy = PolicyClient(["http://policy"], "m", max_model_len=100, max_retries=0,
                                  transport=transport)  # fmt: skip
        else:
            policy = _policy(Recorder())
        await policy.start()
        return Components(GatedRunner(), settings_task_loader(s), {"test": ready},
                          policy=policy, aclose=policy.aclose)  # fmt: skip

    app = create_app(make_settings(tmp_path), components)
    with TestClient(app, base_url="http://127.0.0.1", headers=AUTH) as c:
        yield c


def test_the_service_detokenizes_through_its_policy_client(service: TestClient) -> None:
    assert _ask(service, STUB_IDS, headers={"Authorization": "Bearer wrong"}).status_code == 401
    r = _ask(service, STUB_IDS)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "the policy server (/detokenize)"
    assert {int(k): v for k, v in body["texts"].items()} == {i: STUB.token_str(i) for i in STUB_IDS}
    assert _ask(service, [-3]).json()["detail"][0]["loc"] == ["body", "ids", 0]
    # Out of the stand-in's vocabulary (vLLM answers 400 too): ids, not an error page.
    r = _ask(service, [STUB.vocab_size + 5])
    assert r.status_code == 200 and r.json()["source"] is None
    assert "out of vocabulary" in r.json()["note"]


@pytest.mark.parametrize("service", ["failing"], indirect=True)
def test_a_failing_policy_server_degrades_the_service_view_to_ids(service: TestClient) -> None:
    r = _ask(service, [1, 2, 3])
    assert r.status_code == 200, r.text
    assert r.json()["source"] is None and r.json()["texts"] == {}
    assert "HTTP 503" in r.json()["note"]
