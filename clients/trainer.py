"""Trainer-side client of the rollouts service (sync and async, httpx).

    client = TrainerClient("http://127.0.0.1:8080", api_key)
    rid = client.submit("/data/tasks.parquet", n_samples=8)
    for batch in client.batches(max_groups=64, rollout_id=rid):
        train_step(batch.to_skyrl())
        batch.ack()

Delivery is at-least-once until ack (docs/delivery.md). The client makes it exactly-once for
its caller: it remembers the trajectory ids of batches whose ack came too late (409: a lease
expiry or a service restart) and silently acks and skips those groups when they come again.
Groups regraded after a trainer had them come only to `lease(regraded=True)` /
`batches(regraded=True)`, deduplicated by trajectory id and grading. Connection errors, 5xx
and 429 are retried with exponential backoff. Every submit carries an Idempotency-Key, the
same on each of its retries, so a retried submit never starts a second rollout.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa

from clients.skyrl_output import generator_output
from service.trajectory import Trajectory, to_arrow
from service.wire import (
    REMAINING_HEADER,
    Group,
    PolicyState,
    RegradeStatus,
    RolloutCreated,
    RolloutStatus,
)

IDEMPOTENCY_HEADER = "Idempotency-Key"


class ServiceError(RuntimeError):
    def __init__(self, status_code: int, message: str) -> None:
        self.status_code = status_code
        super().__init__(f"HTTP {status_code}: {message}")


@dataclass
class Batch:
    batch_id: str
    lease_expires_at: float
    groups: list[Group]
    _ack: Callable[[Batch], Any] = field(repr=False, default=lambda b: None)
    # Groups regraded after a trainer had them: their latest gradings (each trajectory's
    # `gradings` keeps what it was trained on) and their advantages recomputed.
    regraded: bool = False
    # Every trajectory the lease carried, duplicates left out of `groups` included: its ack
    # settles them all (_Dedupe).
    _leased: list[Trajectory] = field(repr=False, default_factory=list)

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for g in self.groups for t in g.trajectories]

    def ack(self) -> Any:
        """Acknowledge: the service never offers these groups again. (Async client: await it.)"""
        return self._ack(self)

    def to_arrow(self) -> pa.Table:
        return to_arrow(self.trajectories)

    def to_skyrl(self, pad_token_id: int = 0) -> dict[str, Any]:
        """SkyRL's GeneratorOutput for this batch, one entry per trajectory, as
        `RolloutsGenerator` returns it (the same conversion, `clients.skyrl_output`):
        `TrajectoryID`s and `uids` from the service's group ids, `rollout_metrics`, vLLM stop
        reasons, the service's `advantages`, `exclude_from_baseline`. A masked sample trains
        nothing (all-zero loss mask) and gets its group's neutral reward, never a 0; an empty
        response is one `pad_token_id` with mask 0. See docs/skyrl.md."""
        return generator_output(self.trajectories, pad_token_id=pad_token_id)


# A weight update answers once every server has loaded the weights: minutes for a large model.
_UPDATE_TIMEOUT = httpx.Timeout(None, connect=10.0)


class Keep(enum.Enum):
    """`set_policy(version)` without max_staleness: the service keeps the bound in force."""

    KEEP = "keep"


KEEP = Keep.KEEP


def _policy_body(
    version: int,
    max_staleness: int | None | Keep,
    weights_path: str | None,
    lora_path: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"version": version}
    if max_staleness is not KEEP:  # None is sent: it removes the bound
        body["max_staleness"] = max_staleness
    if weights_path is not None:
        body["weights_path"] = weights_path
    if lora_path is not None:
        body["lora_path"] = lora_path
    return body


def _rollout_body(
    tasks_path: str,
    n_samples: int,
    ids: list[str] | None,
    limit: int | None,
    sampling: dict[str, Any] | None,
    agent: dict[str, Any] | None,
    advantage: dict[str, Any] | None,
    priority: int,
    uncalibrated: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "tasks": {"path": tasks_path, "ids": ids, "limit": limit},
        "n_samples": n_samples,
        "priority": priority,
    }
    if uncalibrated is not None:  # "fallback" or "drop" (docs/reliability.md#calibration)
        body["uncalibrated"] = uncalibrated
    for key, value in (("sampling", sampling), ("agent", agent), ("advantage", advantage)):
        if value is not None:
            body[key] = value
    return body


def _lease_body(
    max_groups: int, rollout_id: str | None, wait_s: float, regraded: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {"max_groups": max_groups, "wait_s": wait_s, "rollout_id": rollout_id}
    if regraded:
        body["regraded"] = True
    return body


def _error(r: httpx.Response) -> ServiceError:
    try:
        detail = r.json().get("detail", r.text)
    except ValueError:
        detail = r.text
    return ServiceError(r.status_code, str(detail))


# Trajectories _Dedupe remembers at most (a few hundred bytes each): far more than the groups
# of the leases that can expire before their groups come back.
DEDUPE_WINDOW = 100_000


class _Dedupe:
    """Trajectories handed out whose ack came too late (409: the lease expired, the service
    restarted): their groups are offered again, and are not handed out twice. Of regraded
    groups, (trajectory id, gradings): a later regrade of the same group is new.

    A batch acked in time (200) is never offered again (docs/delivery.md), so its ids need no
    remembering; and a group acked too late comes back in the next leases (an expired group is
    offered again before newer ones), where its ack in time lets it go. So `pending` holds only
    groups on their way back, not the run's history. Groups that never come back (dropped as
    stale, re-run under new ids, cancelled) would stay: the oldest beyond DEDUPE_WINDOW go,
    by then long past their return."""

    def __init__(self, window: int = DEDUPE_WINDOW) -> None:
        self.window = window
        self.pending: dict[tuple[str, int], None] = {}  # insertion-ordered: oldest first

    @staticmethod
    def _key(t: Trajectory, regraded: bool) -> tuple[str, int]:
        return t.trajectory_id, len(t.gradings) if regraded else -1

    def fresh(self, groups: list[Group], regraded: bool = False) -> list[Group]:
        return [
            g
            for g in groups
            if not all(self._key(t, regraded) in self.pending for t in g.trajectories)
        ]

    def record(self, batch: Batch, in_time: bool) -> None:
        """The batch was acked: in time (its groups are final) or too late (they come back)."""
        keys = [self._key(t, batch.regraded) for t in batch._leased or batch.trajectories]
        if in_time:
            for k in keys:
                self.pending.pop(k, None)
            return
        self.pending.update(dict.fromkeys(keys))
        while len(self.pending) > self.window:
            del self.pending[next(iter(self.pending))]


def _retryable(r: httpx.Response) -> bool:
    return r.status_code >= 500 or r.status_code == 429


def _delay(attempt: int, r: httpx.Response | None, base: float) -> float:
    if r is not None and "Retry-After" in r.headers:
        try:
            return float(r.headers["Retry-After"])
        except ValueError:
            pass
    return min(base * 2**attempt, 30.0)


class TrainerClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = 10,
        backoff_s: float = 0.25,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self._dedupe = _Dedupe()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TrainerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            r: httpx.Response | None = None
            try:
                r = self._http.request(method, path, **kw)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
            else:
                if not _retryable(r) or attempt == self.retries:
                    return r
            time.sleep(_delay(attempt, r, self.backoff_s))
        raise AssertionError("unreachable")

    def _ok(self, r: httpx.Response) -> httpx.Response:
        if r.status_code >= 400:
            raise _error(r)
        return r

    def submit(
        self,
        tasks_path: str,
        n_samples: int = 8,
        *,
        ids: list[str] | None = None,
        limit: int | None = None,
        sampling: dict[str, Any] | None = None,
        agent: dict[str, Any] | None = None,
        advantage: dict[str, Any] | None = None,
        priority: int = 0,
        uncalibrated: str | None = None,
    ) -> str:
        body = _rollout_body(
            tasks_path, n_samples, ids, limit, sampling, agent, advantage, priority, uncalibrated
        )
        # One key per submit, the same on every retry: a retry after a lost response gets the
        # rollout the first attempt made, never a second one.
        key = {IDEMPOTENCY_HEADER: uuid.uuid4().hex}
        r = self._request("POST", "/v1/rollouts", json=body, headers=key)
        return self._ok(r).json()["id"]

    def status(self, rollout_id: str) -> RolloutStatus:
        r = self._ok(self._request("GET", f"/v1/rollouts/{rollout_id}"))
        return RolloutStatus.model_validate_json(r.content)

    def cancel(self, rollout_id: str) -> RolloutStatus:
        r = self._ok(self._request("DELETE", f"/v1/rollouts/{rollout_id}"))
        return RolloutStatus.model_validate_json(r.content)

    def regrade(
        self,
        rollout_id: str,
        *,
        tasks_path: str | None = None,
        task_ids: list[str] | None = None,
    ) -> RegradeStatus:
        """Start grading the rollout's stored samples again (docs/regrade.md); follow it with
        `regrade_status`, and lease its regraded groups with `batches(regraded=True)`."""
        body = {"tasks_path": tasks_path, "task_ids": task_ids}
        r = self._ok(self._request("POST", f"/v1/rollouts/{rollout_id}/regrade", json=body))
        return RegradeStatus.model_validate_json(r.content)

    def regrade_status(self, rollout_id: str) -> RegradeStatus:
        r = self._ok(self._request("GET", f"/v1/rollouts/{rollout_id}/regrade"))
        return RegradeStatus.model_validate_json(r.content)

    def set_policy(
        self,
        version: int,
        max_staleness: int | None | Keep = KEEP,
        *,
        weights_path: str | None = None,
        lora_path: str | None = None,
    ) -> PolicyState:
        """The new policy version. With `weights_path` (a checkpoint folder the policy servers
        can read) or `lora_path`, the service loads it on every server first (docs/
        weight-updates.md); answers once every server serves `version` or is out of rotation.
        `max_staleness`: the new bound; None removes it; not given, the bound stays."""
        body = _policy_body(version, max_staleness, weights_path, lora_path)
        r = self._request("POST", "/v1/policy", json=body, timeout=_UPDATE_TIMEOUT)
        return PolicyState.model_validate_json(self._ok(r).content)

    def pause_policy(self, mode: str = "keep") -> PolicyState:
        """Pause every policy server (`keep`, `abort` or `wait`) before moving the weights
        yourself; then `set_policy(version)` tags and resumes them."""
        r = self._request("POST", "/v1/policy/pause", json={"mode": mode}, timeout=_UPDATE_TIMEOUT)
        return PolicyState.model_validate_json(self._ok(r).content)

    def resume_policy(self) -> PolicyState:
        r = self._request("POST", "/v1/policy/resume", timeout=_UPDATE_TIMEOUT)
        return PolicyState.model_validate_json(self._ok(r).content)

    def _ack(self, batch: Batch) -> None:
        r = self._request("POST", f"/v1/batches/{batch.batch_id}/ack")
        # 409: the lease expired (or the service restarted); the groups come back and are
        # skipped here by trajectory id, so the caller still sees each of them once.
        if r.status_code not in (200, 409):
            raise _error(r)
        self._dedupe.record(batch, in_time=r.status_code == 200)

    def lease(
        self,
        max_groups: int = 64,
        rollout_id: str | None = None,
        wait_s: float = 30.0,
        regraded: bool = False,
    ) -> tuple[Batch | None, int]:
        """One lease call: (batch or None, groups still to be delivered). Groups this client
        handed out already (their ack came too late) are acked again and left out; a batch of
        nothing but those is None.
        `regraded`: groups regraded after a trainer had them instead (docs/delivery.md)."""
        body = _lease_body(max_groups, rollout_id, wait_s, regraded)
        r = self._ok(self._request("POST", "/v1/batches/lease", json=body))
        remaining = int(r.headers.get(REMAINING_HEADER, "-1"))
        if r.status_code == 204:
            return None, remaining
        raw = r.json()
        groups = [Group.model_validate(g) for g in raw["groups"]]
        batch = Batch(raw["batch_id"], raw["lease_expires_at"], groups, self._ack, regraded)
        batch._leased = batch.trajectories
        fresh = self._dedupe.fresh(groups, regraded)
        if len(fresh) < len(groups):
            if not fresh:
                batch.ack()
                return None, remaining
            batch.groups = fresh  # acking the batch acks the duplicates too
        return batch, remaining

    def batches(
        self,
        max_groups: int = 64,
        rollout_id: str | None = None,
        wait_s: float = 30.0,
        stop_when_done: bool = True,
        regraded: bool = False,
    ) -> Iterator[Batch]:
        """Yield batches of complete groups (`regraded`: of regraded groups). With
        stop_when_done, stop once nothing is left to deliver (every group of the rollout, or of
        all rollouts, acked or dropped)."""
        while True:
            batch, remaining = self.lease(max_groups, rollout_id, wait_s, regraded)
            if batch is not None:
                yield batch
            elif stop_when_done and remaining == 0:
                return


class AsyncTrainerClient:
    """The same API as TrainerClient, for asyncio trainers (`await batch.ack()`)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = 10,
        backoff_s: float = 0.25,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s
        )
        self.retries = retries
        self.backoff_s = backoff_s
        self._dedupe = _Dedupe()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncTrainerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            r: httpx.Response | None = None
            try:
                r = await self._http.request(method, path, **kw)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
            else:
                if not _retryable(r) or attempt == self.retries:
                    return r
            await asyncio.sleep(_delay(attempt, r, self.backoff_s))
        raise AssertionError("unreachable")

    async def _json(self, method: str, path: str, **kw: Any) -> bytes:
        r = await self._request(method, path, **kw)
        if r.status_code >= 400:
            raise _error(r)
        return r.content

    async def submit(
        self,
        tasks_path: str,
        n_samples: int = 8,
        *,
        ids: list[str] | None = None,
        limit: int | None = None,
        sampling: dict[str, Any] | None = None,
        agent: dict[str, Any] | None = None,
        advantage: dict[str, Any] | None = None,
        priority: int = 0,
        uncalibrated: str | None = None,
    ) -> str:
        body = _rollout_body(
            tasks_path, n_samples, ids, limit, sampling, agent, advantage, priority, uncalibrated
        )
        return await self.submit_body(body)

    async def submit_body(self, body: dict[str, Any], key: str | None = None) -> str:
        """Submit a rollout request given whole (service.wire.RolloutRequest as JSON); the same
        `key` again answers the same rollout."""
        headers = {IDEMPOTENCY_HEADER: key or uuid.uuid4().hex}
        return RolloutCreated.model_validate_json(
            await self._json("POST", "/v1/rollouts", json=body, headers=headers)
        ).id

    async def status(self, rollout_id: str) -> RolloutStatus:
        return RolloutStatus.model_validate_json(
            await self._json("GET", f"/v1/rollouts/{rollout_id}")
        )

    async def cancel(self, rollout_id: str) -> RolloutStatus:
        return RolloutStatus.model_validate_json(
            await self._json("DELETE", f"/v1/rollouts/{rollout_id}")
        )

    async def regrade(
        self,
        rollout_id: str,
        *,
        tasks_path: str | None = None,
        task_ids: list[str] | None = None,
    ) -> RegradeStatus:
        body = {"tasks_path": tasks_path, "task_ids": task_ids}
        raw = await self._json("POST", f"/v1/rollouts/{rollout_id}/regrade", json=body)
        return RegradeStatus.model_validate_json(raw)

    async def regrade_status(self, rollout_id: str) -> RegradeStatus:
        raw = await self._json("GET", f"/v1/rollouts/{rollout_id}/regrade")
        return RegradeStatus.model_validate_json(raw)

    async def set_policy(
        self,
        version: int,
        max_staleness: int | None | Keep = KEEP,
        *,
        weights_path: str | None = None,
        lora_path: str | None = None,
    ) -> PolicyState:
        body = _policy_body(version, max_staleness, weights_path, lora_path)
        raw = await self._json("POST", "/v1/policy", json=body, timeout=_UPDATE_TIMEOUT)
        return PolicyState.model_validate_json(raw)

    async def pause_policy(self, mode: str = "keep") -> PolicyState:
        raw = await self._json(
            "POST", "/v1/policy/pause", json={"mode": mode}, timeout=_UPDATE_TIMEOUT
        )
        return PolicyState.model_validate_json(raw)

    async def resume_policy(self) -> PolicyState:
        raw = await self._json("POST", "/v1/policy/resume", timeout=_UPDATE_TIMEOUT)
        return PolicyState.model_validate_json(raw)

    async def _ack(self, batch: Batch) -> None:
        r = await self._request("POST", f"/v1/batches/{batch.batch_id}/ack")
        if r.status_code not in (200, 409):
            raise _error(r)
        self._dedupe.record(batch, in_time=r.status_code == 200)

    async def lease(
        self,
        max_groups: int = 64,
        rollout_id: str | None = None,
        wait_s: float = 30.0,
        regraded: bool = False,
    ) -> tuple[Batch | None, int]:
        body = _lease_body(max_groups, rollout_id, wait_s, regraded)
        r = await self._request("POST", "/v1/batches/lease", json=body)
        if r.status_code >= 400:
            raise _error(r)
        remaining = int(r.headers.get(REMAINING_HEADER, "-1"))
        if r.status_code == 204:
            return None, remaining
        raw = r.json()
        groups = [Group.model_validate(g) for g in raw["groups"]]
        batch = Batch(raw["batch_id"], raw["lease_expires_at"], groups, self._ack, regraded)
        batch._leased = batch.trajectories
        fresh = self._dedupe.fresh(groups, regraded)
        if len(fresh) < len(groups):
            if not fresh:
                await batch.ack()
                return None, remaining
            batch.groups = fresh
        return batch, remaining

    async def batches(
        self,
        max_groups: int = 64,
        rollout_id: str | None = None,
        wait_s: float = 30.0,
        stop_when_done: bool = True,
        regraded: bool = False,
    ) -> AsyncIterator[Batch]:
        while True:
            batch, remaining = await self.lease(max_groups, rollout_id, wait_s, regraded)
            if batch is not None:
                yield batch
            elif stop_when_done and remaining == 0:
                return
