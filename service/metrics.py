"""Prometheus collectors of the service, on a registry of their own (one per app, so tests
can build several apps in one process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from service.trajectory import Trajectory

if TYPE_CHECKING:
    from sandboxes.calibration import Calibrator
    from service.policy.servers import PolicyStats
    from service.store import DiskBudget

STAGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.samples = Counter(
            "rollouts_samples", "Finished samples by status", ["status"], registry=r
        )
        self.tokens = Counter(
            "rollouts_tokens", "Tokens of finished samples (rate() gives tokens/s)", ["kind"],
            registry=r,
        )  # fmt: skip
        self.stage_seconds = Histogram(
            "rollouts_sandbox_stage_seconds", "Per-sample stage latency", ["stage"],
            buckets=STAGE_BUCKETS, registry=r,
        )  # fmt: skip
        # A gauge, not a counter: rewards may be negative, and a counter refuses to go down.
        self.reward_sum = Gauge(
            "rollouts_reward_sum", "Sum of rewards by policy version", ["policy_version"],
            registry=r,
        )  # fmt: skip
        self.reward_count = Counter(
            "rollouts_reward_count", "Scored samples by policy version", ["policy_version"],
            registry=r,
        )  # fmt: skip
        self.reward_flags = Counter(
            "rollouts_reward_flags", "Grading flags on finished samples (suspected hacks among "
            "them: docs/reliability.md)", ["flag"], registry=r,
        )  # fmt: skip
        self.leases = Counter(
            "rollouts_leases", "Lease events", ["event"], registry=r
        )  # granted / acked / expired / empty
        self.groups_dropped_stale = Counter(
            "rollouts_groups_stale", "Groups too old for max_staleness: dropped (drop), run "
            "again (requeue), dropped after max_stale_requeues re-runs (requeue_limit)",
            ["action"], registry=r,
        )  # fmt: skip
        for action in ("drop", "requeue", "requeue_limit"):  # shown at 0 before the first
            self.groups_dropped_stale.labels(action)
        self.queued_samples = Gauge(
            "rollouts_queued_samples", "Samples waiting for a slot", registry=r
        )
        self.running_samples = Gauge("rollouts_running_samples", "Samples in flight", registry=r)
        self.concurrency_level = Gauge(
            "rollouts_concurrency_level", "Samples allowed in their episode at once (the "
            "controller's level with --adaptive-concurrency, else --max-concurrent-samples)",
            registry=r,
        )  # fmt: skip
        self.concurrency_windows = Counter(
            "rollouts_concurrency_windows", "Windows the concurrency controller closed, by "
            "what it decided (service/concurrency.py: short, warmup, grow, keep, revert, lower, "
            "hold, backoff)", ["decision"], registry=r,
        )  # fmt: skip
        self.groups_by_state = Gauge(
            "rollouts_groups", "Groups by state (refreshed on scrape)", ["state"], registry=r
        )
        self.warm_pool = Gauge("rollouts_warm_pool_size", "Warm sandboxes ready", registry=r)
        self.policy_version = Gauge("rollouts_policy_version", "Current policy version", registry=r)
        self.disk_free = Gauge(
            "rollouts_data_disk_free_bytes", "Free space on the data dir's disk", registry=r
        )
        self.disk_size = Gauge(
            "rollouts_data_disk_size_bytes", "Size of the data dir's disk", registry=r
        )
        self.disk_reserve = Gauge(
            "rollouts_data_disk_reserve_bytes", "Free space new work may not use", registry=r
        )
        self.store_bytes = Gauge(
            "rollouts_store_bytes", "The database's files (main, WAL, shm)", registry=r
        )
        self.payloads_purged = Counter(
            "rollouts_payloads_purged", "Payloads deleted after the retention period", registry=r
        )
        self.generated_by_version = Counter(
            "rollouts_generated_tokens_by_version",
            "Generated tokens of finished samples by the policy version that produced them",
            ["policy_version"], registry=r,
        )  # fmt: skip
        self.requests_refused = Counter(
            "rollouts_requests_refused", "Rollout requests refused for room", ["reason"],
            registry=r,
        )  # fmt: skip
        self.sample_retries = Counter(
            "rollouts_sample_retries", "Masked samples run again, by the status of the masked "
            "run", ["reason"], registry=r,
        )  # fmt: skip

    def bind_warm_pool(self, fn: Callable[[], float]) -> None:
        self.warm_pool.set_function(fn)

    def bind_sandbox_nodes(self, stats: Callable[[], dict]) -> None:
        """Per-node sandbox gauges (the Ray backend's `stats()`), read on every scrape."""
        self.registry.register(_SandboxNodes(stats))

    def bind_calibration(self, calibrator: Calibrator) -> None:
        """Oracle calibration (sandboxes/calibration.py), read on every scrape."""
        self.registry.register(_Calibration(calibrator))

    def bind_policy(self, stats: Callable[[], PolicyStats]) -> None:
        """Weight-update counters of the policy client, read on every scrape."""
        self.registry.register(_PolicyUpdates(stats))

    def bind_disk(self, disk: DiskBudget) -> None:
        """Disk gauges read on every scrape."""
        self.disk_free.set_function(lambda: float(disk.free_bytes()))
        self.disk_size.set_function(lambda: float(disk.size_bytes()))
        self.disk_reserve.set(disk.reserve_bytes)
        self.store_bytes.set_function(lambda: float(disk.store.disk_bytes()))

    def observe_trajectory(self, t: Trajectory, generated_tokens: int) -> None:
        """`generated_tokens` is t.generated_tokens(), which the caller has counted already.
        Tokens are counted over every segment of a summarized episode."""
        self.samples.labels(t.status.value).inc()
        segments = t.segments or [t]
        self.tokens.labels("prompt").inc(sum(len(s.prompt_token_ids) for s in segments))
        self.tokens.labels("response").inc(sum(len(s.response_token_ids) for s in segments))
        self.tokens.labels("generated").inc(generated_tokens)
        tm = t.timings
        for stage in ("create_s", "generate_s", "agent_s", "verify_s", "teardown_s", "total_s"):
            value = getattr(tm, stage)
            if value > 0:
                self.stage_seconds.labels(stage.removesuffix("_s")).observe(value)
        for flag in t.reward_flags:
            self.reward_flags.labels(flag).inc()
        by_version: dict[int, int] = {}
        for s in segments:
            for v in s.response_policy_versions:
                if v >= 0:
                    by_version[v] = by_version.get(v, 0) + 1
        for v, n in by_version.items():
            self.generated_by_version.labels(str(v)).inc(n)
        if t.reward is not None:
            v = str(t.policy_version_start)
            self.reward_sum.labels(v).inc(t.reward)
            self.reward_count.labels(v).inc()


class _PolicyUpdates:
    """The policy client's weight-update counters (service/policy/servers.py's PolicyStats)."""

    COUNTERS = {
        "policy_pauses": ("pauses", "Policy server pauses the service made"),
        "policy_pause_seconds": (
            "pause_seconds", "Seconds policy servers were held paused by the service, summed",
        ),
        "policy_external_pause_seconds": (
            "external_pause_seconds",
            "Seconds requests waited on policy servers paused by someone else",
        ),
        "policy_requests_in_flight_at_pauses": (
            "in_flight_at_pauses", "Generation requests in flight when pauses began, summed",
        ),
        "policy_aborted_generations": (
            "aborted_generations", "Generations ended by an abort and continued from their partial",
        ),
        "policy_updates": ("updates", "Weight updates the service applied"),
        "tokens_discarded": (
            "discarded_tokens", "Generated tokens received from the engine and not kept (should "
            "stay 0)",
        ),
    }  # fmt: skip

    def __init__(self, stats: Callable[[], PolicyStats]) -> None:
        self.stats = stats

    def describe(self) -> list:
        return []

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.stats()
        for name, (attr, doc) in self.COUNTERS.items():
            yield CounterMetricFamily(f"rollouts_{name}", doc, value=float(getattr(s, attr)))
        yield GaugeMetricFamily(
            "rollouts_policy_requests_in_flight_at_pause",
            "Generation requests in flight when the last pause began",
            value=float(s.in_flight_at_pause),
        )


class _Calibration:
    """Tasks whose oracle the grader does not score 1 unflagged (their samples are graded in
    the fallback, flagged `unguarded`, or dropped), and this process's oracle runs."""

    def __init__(self, calibrator: Calibrator) -> None:
        self.calibrator = calibrator

    def describe(self) -> list:
        return []

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield GaugeMetricFamily(
            "rollouts_uncalibrated_tasks",
            "Tasks whose own oracle does not score 1 unflagged through the grader (this "
            "grader and sandbox setting; docs/reliability.md#calibration)",
            value=float(len(self.calibrator.uncalibrated())),
        )
        runs = CounterMetricFamily(
            "rollouts_calibrations", "Oracle calibrations run, by outcome", labels=["outcome"]
        )
        for outcome, n in sorted(self.calibrator.runs.items()):
            runs.add_metric([outcome], float(n))
        yield runs


class _SandboxNodes:
    """Placement and health per sandbox node: nodes join and leave, so the families are
    built from the backend's `stats()` at each scrape rather than kept as labelled gauges."""

    GAUGES = {
        "capacity": "Sandboxes the node may run at once (its rollouts_sandbox resource)",
        "in_use": "Sandbox slots taken on the node now",
        "alive": "1 while the node is in the cluster",
        "ready": "1 while the node's executor answers and can take sandboxes",
    }
    COUNTERS = {
        "placed": "Samples placed on the node",
        "failures": "Failed or lost sandbox calls on the node",
        "restarts": "Restarts of the node's sandbox executor",
    }

    def __init__(self, stats: Callable[[], dict]) -> None:
        self.stats = stats

    def describe(self) -> list:
        return []  # families vary with the cluster; nothing to check at registration

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        nodes = self.stats().get("nodes", {})
        for name, doc in self.GAUGES.items():
            family = GaugeMetricFamily(f"rollouts_sandbox_node_{name}", doc, labels=["node"])
            for node_id, n in nodes.items():
                family.add_metric([node_id], float(n.get(name) or 0))
            yield family
        for name, doc in self.COUNTERS.items():
            family = CounterMetricFamily(f"rollouts_sandbox_node_{name}", doc, labels=["node"])
            for node_id, n in nodes.items():
                family.add_metric([node_id], float(n.get(name) or 0))
            yield family
