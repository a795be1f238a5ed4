"""Record a real vLLM server's answers on the weight-update routes, as contract fixtures
(tests/fixtures/vllm-wire/updates/).

    python scripts/record_update_wire.py URL CKPT_A CKPT_B OUT_DIR

URL: a vLLM 0.32 server started with VLLM_SERVER_DEV_MODE=1 and --enable-scale-out, serving
CKPT_A (e.g. scripts/tiny_qwen3.py --peak 40 --seed 1; CKPT_B the same with --seed 2). It is
paused, reloaded and tagged along the way. Each file holds {request, status, response}, like
shared/vllm-wire/. Needs only httpx.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

SAMPLING = {
    "n": 2, "max_tokens": 120, "min_tokens": 0, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
    "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
    "stop": [], "ignore_eos": False, "logprobs": 1, "seed": 3,
}  # fmt: skip


def main(url: str, ckpt_a: str, ckpt_b: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    http = httpx.Client(base_url=url, timeout=600)

    def call(name: str | None, method: str, path: str, body: Any = None) -> httpx.Response:
        r = http.request(method, path, json=body)
        if name is not None:
            try:
                response: Any = r.json()
            except ValueError:
                response = r.text
            record = {
                "request": {"method": method, "path": path, "json": body},
                "status": r.status_code,
                "response": response,
            }
            (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        return r

    def in_background(name: str, path: str, body: Any) -> threading.Thread:
        thread = threading.Thread(target=call, args=(name, "POST", path, body))
        thread.start()
        time.sleep(1.0)  # some tokens are out
        return thread

    prompt = call(None, "POST", "/tokenize", {"messages": [{"role": "user", "content": "Hi."}]})
    ids = prompt.json()["tokens"]
    call("update_weight_version", "POST", "/update_weight_version", {"new_version": "1"})
    call("weight_info", "GET", "/weight_info")
    # A request frozen across an update: two version spans.
    body = {"token_ids": ids, "sampling_params": SAMPLING, "output_mode": "text",
            "return_token_ids": True, "cache_salt": "policy-v1-rec"}  # fmt: skip
    running = in_background("generate_spans_across_update", "/inference/v1/generate", body)
    call(None, "POST", "/pause?mode=keep")
    reload = {"method": "reload_weights", "kwargs": {"weights_path": ckpt_b}}
    call("collective_rpc_reload_weights", "POST", "/collective_rpc", reload)
    call(None, "POST", "/update_weight_version", {"new_version": "2"})
    call(None, "POST", "/resume")
    running.join()
    # A request aborted by a pause: its partial output, on both routes.
    running = in_background("generate_aborted", "/inference/v1/generate", body)
    call("pause_abort", "POST", "/pause?mode=abort")
    running.join()
    call(None, "POST", "/resume")
    completion = {"prompt": ids, **SAMPLING, "return_token_ids": True}
    running = in_background("completions_aborted", "/v1/completions", completion)
    call(None, "POST", "/pause?mode=abort")
    running.join()
    call(None, "POST", "/resume")
    # A prompt longer than the context on the generate route.
    too_long = {"token_ids": ids * 1000, "sampling_params": {**SAMPLING, "n": 1}}
    call("generate_too_long", "POST", "/inference/v1/generate", too_long)
    call(None, "POST", "/collective_rpc", {**reload, "kwargs": {"weights_path": ckpt_a}})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
