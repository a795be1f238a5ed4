"""A verifiers environment server backed by the rollouts service (`rollouts serve-env`).

prime-rl's orchestrator runs every environment as a server it only talks to: ZMQ, a ROUTER
socket here and a DEALER in verifiers' `EnvClient`, frames `[request_id, method, msgpack]` in
and `[request_id, b"delta" | b"reply", msgpack]` out. This module answers its three requests:

- `health`: up.
- `run` (task data, the inference client's config, model, sampling): one sample of our agent
  on the task in our sandbox, generated on the inference server the request names (or on the
  service's own, `--policy service`), graded by our verifier. The trace streams as one delta,
  verifiers' own `DeltaStreamer` diffing it against nothing, then the reply carries the
  episode's head and the trace's size, as verifiers' `EnvServer` answers.
- `cancel` (a run's request id): the run's rollout is cancelled in the service, which stops the
  sample and removes its sandbox; the run answers "Cancelled".

It is a client of the service's HTTP API (layer `clients`): each `run` is a rollout of one
sample, leased and acknowledged when it is done. The request and answer types, the msgpack
encoding and the delta streaming are verifiers', imported from the user's installation.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from clients.trainer import AsyncTrainerClient, ServiceError
from clients.verifiers_trace import Verifiers, load_verifiers, to_episode, to_trace
from service.trajectory import Trajectory
from service.wire import SamplingSpec

log = logging.getLogger("rollouts.serve_env")

PolicySource = Literal["request", "service"]
DEFAULT_ADDRESS = "tcp://127.0.0.1:5000"  # verifiers' own default for an env server
DEFAULT_POLICY: PolicySource = "request"
# A rollout of one sample: rloo over a group of one (the orchestrator builds the groups).
ONE_SAMPLE_ADVANTAGE = {"estimator": "rloo", "min_group_size": 1}
LEASE_WAIT_S = 30.0


class BadRun(ValueError):
    """A `run` this server cannot serve as asked (the caller's to fix): its message names the
    field."""


@dataclass
class EnvSettings:
    service_url: str
    tasks: str  # the task source, as the service names it (inside its tasks roots)
    api_key: str | None = None
    address: str = DEFAULT_ADDRESS
    policy: PolicySource = DEFAULT_POLICY
    agent: dict[str, Any] = field(default_factory=dict)  # the rollout request's `agent`
    retry_masked: int | None = None


def task_id_of(task_data: dict[str, Any]) -> str:
    """The task a run names: `name` (Harbor tasksets' rows carry the task's name), else `id`."""
    for key in ("name", "id"):
        value = task_data.get(key)
        if isinstance(value, str) and value:
            return value
    raise BadRun("task_data.name: name the task to run (its id in the server's --tasks)")


def sampling_of(sampling: dict[str, Any]) -> dict[str, Any]:
    """The rollout request's `sampling` from verifiers' `SamplingConfig` (its extra keys
    included): every set field we know; a set field we do not know is refused, by name."""
    known = set(SamplingSpec.model_fields)
    out: dict[str, Any] = {}
    for key, value in sampling.items():
        if value is None:
            continue
        if key not in known:
            raise BadRun(f"sampling.{key}: not supported by rollouts (supported: {sorted(known)})")
        out[key] = value
    return out


def policy_of(client: Any, model: str) -> dict[str, Any]:
    """The rollout request's `policy`: the inference server's base URL, without the API version
    segment (the service adds its own paths), and the model."""
    base = str(client.base_url).rstrip("/").removesuffix("/v1")
    return {"urls": [base], "model": model}


def rollout_body(s: EnvSettings, req: Any) -> dict[str, Any]:
    """The rollout request for one run (verifiers' `RunRequest`): one sample of the task it
    names, with its sampling, on the inference server it names (`--policy request`)."""
    body: dict[str, Any] = {
        "tasks": {"path": s.tasks, "ids": [task_id_of(req.task_data)]},
        "n_samples": 1,
        "sampling": sampling_of(req.sampling.model_dump(exclude_none=True)),
        "agent": dict(s.agent),
        "advantage": dict(ONE_SAMPLE_ADVANTAGE),
    }
    if s.retry_masked is not None:
        body["retry_masked"] = s.retry_masked
    if s.policy == "request":
        body["policy"] = policy_of(req.client, req.model)
    return body


class EnvServer:
    """The ZMQ side: one asyncio task per request, runs cancellable by their request id."""

    def __init__(self, settings: EnvSettings, vf: Verifiers | None = None) -> None:
        self.vf = vf or load_verifiers()  # first: it says how to install what is missing
        import zmq  # verifiers' own dependency
        import zmq.asyncio

        self.settings = settings
        self.wire = importlib.import_module("verifiers.v1.serve.types")
        self.delta = importlib.import_module("verifiers.v1.serve.delta")
        self.service = AsyncTrainerClient(settings.service_url, settings.api_key, timeout_s=120)
        self._zmq = zmq
        self.ctx = zmq.asyncio.Context()
        self.socket = self.ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(settings.address)
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve_forever(self) -> None:
        log.info("verifiers env server on %s, service %s", self.address, self.settings.service_url)
        try:
            while True:
                frames = await self.socket.recv_multipart()
                if len(frames) != 4:
                    log.warning("ignored a message of %d frames (expected 4)", len(frames))
                    continue
                client_id, request_id, method, payload = frames
                task = asyncio.create_task(self._handle(client_id, request_id, method, payload))
                if method == b"run":
                    # Registered before the handler runs, so a cancel right behind it finds it.
                    self._running[request_id.decode()] = task
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.service.aclose()
            self.socket.close()
            self.ctx.term()

    async def _send(self, client_id: bytes, request_id: bytes, kind: bytes, data: bytes) -> None:
        await self.socket.send_multipart([client_id, request_id, kind, data], copy=False)

    async def _handle(self, client_id: bytes, request_id: bytes, method: bytes, payload: bytes):
        wire = self.wire
        try:
            raw = self.delta.unpack(payload)
            route = method.decode()
            if route == "health":
                response = wire.HealthResponse()
            elif route == "run":
                try:
                    req = wire.RunRequest.model_validate(raw)
                    response = await self._run(req, client_id, request_id)
                finally:
                    self._running.pop(request_id.decode(), None)
            elif route == "cancel":
                target = wire.CancelRequest.model_validate(raw).request_id
                running = self._running.get(target)
                if running is not None:
                    running.cancel()
                response = wire.CancelResponse(cancelled=running is not None)
            else:
                response = wire.BaseResponse(success=False, error=f"unknown method {route!r}")
        except asyncio.CancelledError:
            response = wire.BaseResponse(success=False, error="Cancelled: rollout cancelled")
        except (BadRun, ServiceError) as e:
            response = wire.BaseResponse(success=False, error=str(e))
        except Exception as e:  # a failed request is an answer, never the server's end
            log.warning("request failed", exc_info=True)
            response = wire.BaseResponse(success=False, error=f"{type(e).__name__}: {e}")
        with contextlib.suppress(self._zmq.ZMQError):
            await self._send(
                client_id, request_id, b"reply", self.delta.pack(response.model_dump(mode="python"))
            )

    async def _run(self, req: Any, client_id: bytes, request_id: bytes) -> Any:
        trajectory = await self.collect(req, f"verifiers-run-{request_id.hex()}")
        trace = to_trace(self.vf, trajectory, req.task_data, req.model)
        episode = to_episode(self.vf, req.task_data, [trace], [])

        async def send_delta(delta: dict[str, Any]) -> None:
            await self._send(client_id, request_id, b"delta", self.delta.pack(delta))

        await self.delta.DeltaStreamer(lambda: [trace], send_delta).flush()
        return self.wire.RunResponse(
            head=self.delta.dump(episode, exclude={"traces"}),
            traces=[
                self.delta.TraceSummary(id=trace.id, nodes=len(trace.nodes), calls=len(trace.calls))
            ],
        )

    async def collect(self, req: Any, key: str) -> Trajectory:
        """One sample of the task, collected and graded by the service; cancelling this
        cancels the rollout (the service removes its sandbox). `key` (the run's request id) is
        the submit's idempotency key: a cancel that lands while the submit is in flight learns
        the rollout's id by submitting again, which starts nothing new."""
        body = rollout_body(self.settings, req)
        try:
            rollout_id = await self.service.submit_body(body, key)
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel_submitted(body, key))
            raise
        try:
            while True:
                batch, remaining = await self.service.lease(
                    max_groups=1, rollout_id=rollout_id, wait_s=LEASE_WAIT_S
                )
                if batch is not None:
                    await batch.ack()
                    return batch.trajectories[0]
                if remaining == 0:
                    status = await self.service.status(rollout_id)
                    raise ServiceError(500, f"rollout {rollout_id} ended {status.status} empty")
        except asyncio.CancelledError:
            await asyncio.shield(self.service.cancel(rollout_id))
            raise

    async def _cancel_submitted(self, body: dict[str, Any], key: str) -> None:
        with contextlib.suppress(ServiceError):
            await self.service.cancel(await self.service.submit_body(body, key))
