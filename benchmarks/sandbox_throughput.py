"""Oracle-verify throughput of our sandboxes beside a cold `docker run` harness and the floor.

Three ways to run the same trial (the task's solve.sh, then its tests) on the same image with the
same isolation flags, interleaved at each concurrency level:
- ours: `run_oracle` through `DockerBackend` (warm pool, exec streaming, fresh verifier);
- cold: what a simple harness does: one `docker run` (CLI subprocess) of a fresh container for
  the solve and another for the tests, files in and out as tar on stdin/stdout, no pool;
- floor: solve and tests by one `docker exec` in an already running container: the cost of the
  work itself, with no container created or removed.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.cpu_cost import CpuMeter
from benchmarks.rounds import RoundResult, TrialFailed
from benchmarks.self_profile import SelfProfile
from sandboxes.control import ControlChannel
from sandboxes.docker_adapter import DockerAdapter
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ImageResolver
from sandboxes.isolation import container_args
from sandboxes.oracle import SOLUTION_DIR, run_oracle
from sandboxes.pool import PoolSettings
from sandboxes.runtimes import engine_runtimes
from sandboxes.task import Task
from sandboxes.workspace_tar import add_files, build_tar, check_workspace, copy_workspace

BENCH_LABEL = "rollouts.bench_id"


class TimedAdapter(DockerAdapter):
    """Records how long each container removal takes (teardown runs in the background, so the
    episode never sees it; the benchmark still reports its cost)."""

    def __init__(self) -> None:
        super().__init__()
        self.remove_s: list[float] = []
        self.calls = {"create": 0, "exec": 0, "attach": 0}  # engine calls, counted

    async def remove(self, container_id: str) -> None:
        t0 = time.monotonic()
        await super().remove(container_id)
        self.remove_s.append(time.monotonic() - t0)

    async def create_container(self, args: dict[str, Any]) -> str:
        self.calls["create"] += 1
        return await super().create_container(args)

    async def exec_stream(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["exec"] += 1
        return await super().exec_stream(*args, **kwargs)

    async def attach_stream(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["attach"] += 1
        return await super().attach_stream(*args, **kwargs)

    def attach_socket(self, *args: Any, **kwargs: Any) -> Any:  # the control channel's
        self.calls["attach"] += 1
        return super().attach_socket(*args, **kwargs)


def round_tasks(tasks: list[Task], concurrency: int, distinct: bool = False) -> list[Task]:
    """A round's trials: the tasks in turn, at least twice as many as the concurrency (a level
    above the number of tasks would otherwise never fill). `distinct`: repeats get ids of their
    own (`ID-r2`), for a runner that names its trials by task (Harbor's task folders)."""
    out = []
    for i in range(max(len(tasks), 2 * concurrency)):
        task, turn = tasks[i % len(tasks)], i // len(tasks)
        out.append(replace(task, id=f"{task.id}-r{turn + 1}") if distinct and turn else task)
    return out


async def _bounded(items: list[Task], concurrency: int, fn: Any) -> float:
    limit = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> None:
        async with limit:
            await fn(task)

    t0 = time.monotonic()
    await asyncio.gather(*(one(t) for t in items))
    return time.monotonic() - t0


# ---------------------------------------------------------------- ours


async def _settle(backend: DockerBackend) -> None:
    """Wait for the pool's background removals and refills: a round hands the next one the same
    warm state it got, so background work is charged to the round that caused it."""
    pending = backend.pool._tasks  # noqa: SLF001 - benchmark instrumentation only
    while pending:
        await asyncio.gather(*list(pending), return_exceptions=True)


async def ours_round(
    backend: DockerBackend, adapter: TimedAdapter, tasks: list[Task], concurrency: int, run: str
) -> RoundResult:
    stages: dict[str, list[float]] = {"create": [], "agent": [], "verify": [], "teardown": []}
    adapter.remove_s.clear()
    calls_before = dict(adapter.calls)

    async def trial(task: Task) -> None:
        labels = {"rollouts.rollout_id": f"bench-{run}", BENCH_LABEL: run}
        result = await run_oracle(task, backend, solve_script=None, labels=labels)
        if result.reward != 1.0:
            raise TrialFailed(
                f"ours: {task.id}: {result.verdict} {result.flags} {result.output[-1500:]}"
            )
        d = result.durations
        stages["create"].append(d.get("create_s", 0.0))
        stages["agent"].append(d.get("agent_s", 0.0) + d.get("workspace_s", 0.0))
        stages["verify"].append(d.get("verify_s", 0.0))

    t0 = time.monotonic()
    await _bounded(tasks, concurrency, trial)
    await _settle(backend)
    seconds = time.monotonic() - t0
    stages["teardown"] = list(adapter.remove_s)
    calls = {k: adapter.calls[k] - calls_before[k] for k in adapter.calls}
    return RoundResult(len(tasks), seconds, stages, calls)


# ---------------------------------------------------------------- cold docker run


def docker_run_flags(args: dict[str, Any]) -> list[str]:
    """The same isolation as `isolation.container_args`, spelled as `docker run` flags. The
    CLI cannot say `network_disabled` (no network set up at all); `--network none` gives the
    same isolation, through a libnetwork sandbox."""
    hc = args["host_config"]
    flags = [
        "--network", hc["network_mode"],
        "--cpus", str(hc["nano_cpus"] / 1e9),
        "--memory", hc["mem_limit"],
        "--memory-swap", hc["memswap_limit"],
        "--pids-limit", str(hc["pids_limit"]),
        "--security-opt", "no-new-privileges",
        "--hostname", args["hostname"],
        "-w", args["working_dir"],
    ]  # fmt: skip
    for cap in hc["cap_drop"]:
        flags += ["--cap-drop", cap]
    if hc.get("read_only"):
        flags.append("--read-only")
    if hc.get("init"):
        flags.append("--init")
    if hc.get("log_config"):
        flags += ["--log-driver", hc["log_config"]["type"]]
    for path, opts in hc["tmpfs"].items():
        flags += ["--tmpfs", f"{path}:{opts}"]
    for key, value in args["environment"].items():
        flags += ["-e", f"{key}={value}"]
    for key, value in args["labels"].items():
        flags += ["--label", f"{key}={value}"]
    return flags


async def _docker_run(flags: list[str], image: str, script: str, stdin: bytes) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        "docker", "run", "--rm", "-i", *flags, image, "bash", "-c", script,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        raise TrialFailed(f"docker run exited {proc.returncode}: {err.decode()[-300:]}")
    return out


_COLD_SOLVE = (
    f"mkdir -p {SOLUTION_DIR} && tar -x -C {SOLUTION_DIR} && "
    f"bash {SOLUTION_DIR}/solve.sh >&2 && tar -c -C /app ."
)
_COLD_TEST = (
    "mkdir -p /logs/verifier && tar -x --no-same-owner -C / && "
    "{ bash /tests/test.sh >/dev/null 2>&1; cat /logs/verifier/reward.txt; }"
)


def _cold_upload(task: Task, workspace: bytes) -> bytes:
    """The workspace under app/ and the tests under tests/, as Harbor lays them out (the
    baseline runs the tests in the workspace's own process, without our verifier runtime)."""
    check_workspace(workspace, prefix="app")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        copy_workspace(workspace, dst, prefix="app")
        add_files(dst, dict(task.test_files), prefix="tests")
    return out.getvalue()


async def cold_round(
    args_for: dict[str, dict[str, Any]], images: dict[str, str], tasks: list[Task], c: int
) -> RoundResult:
    async def trial(task: Task) -> None:
        flags = docker_run_flags(args_for[task.id])
        workspace = await _docker_run(
            flags, images[task.id], _COLD_SOLVE, build_tar(task.solution_files)
        )
        reward = await _docker_run(
            flags, images[task.id], _COLD_TEST, _cold_upload(task, workspace)
        )
        if reward.strip() != b"1":
            raise TrialFailed(f"cold: {task.id}: reward {reward[-100:]!r}")

    return RoundResult(len(tasks), await _bounded(tasks, c, trial))


# ---------------------------------------------------------------- floor: exec in a running one

_FLOOR = f"""
rm -rf /app/* /app/.[!.]* {SOLUTION_DIR} /logs/verifier /tests/*
mkdir -p /logs/verifier {SOLUTION_DIR}
tar -x --no-same-owner -C / || exit 91
bash {SOLUTION_DIR}/solve.sh >/dev/null 2>&1
bash /tests/test.sh >/dev/null 2>&1
cat /logs/verifier/reward.txt
"""


def floor_upload(task: Task) -> bytes:
    files = {f"{SOLUTION_DIR.lstrip('/')}/{k}": v for k, v in task.solution_files.items()}
    files.update({f"tests/{k}": v for k, v in task.test_files.items()})
    return build_tar(files)


class FloorContainers:
    """One started container per concurrency slot and image, reused for every floor trial."""

    def __init__(self, adapter: DockerAdapter) -> None:
        self.adapter = adapter
        self.free: dict[str, list[str]] = {}
        self.all: list[str] = []

    async def ensure(self, args: dict[str, Any], image: str, count: int) -> None:
        have = self.free.setdefault(image, [])
        while len(have) < count:
            cid = await self.adapter.create_container(args)
            self.all.append(cid)
            await self.adapter.start(cid)
            have.append(cid)

    async def aclose(self) -> None:
        await asyncio.gather(*(self.adapter.remove(c) for c in self.all), return_exceptions=True)


async def floor_round(
    floor: FloorContainers, images: dict[str, str], tasks: list[Task], c: int
) -> RoundResult:
    async def trial(task: Task) -> None:
        cid = floor.free[images[task.id]].pop()
        try:
            result, _ = await floor.adapter.exec_stream(
                cid, ["bash", "-c", _FLOOR], stdin=floor_upload(task), timeout_s=300
            )
        finally:
            floor.free[images[task.id]].append(cid)
        if result.output.text().strip() != "1":
            raise TrialFailed(f"floor: {task.id}: {result.output.text()[-300:]!r}")

    return RoundResult(len(tasks), await _bounded(tasks, c, trial))


# ---------------------------------------------------------------- engine operations


ENGINE_OPS = ("create_start", "exec_true", "control_request_true", "remove", "docker_run_true")


async def engine_op_seconds(
    adapter: DockerAdapter, args: dict[str, Any], image: str, repeats: int
) -> dict[str, list[float]]:
    """Wall time of each engine operation a trial is made of, one at a time: create + start
    (SDK), `docker exec` of `true` beside the same `true` through the control channel, remove,
    and the CLI's whole `docker run --rm ... true`."""
    out: dict[str, list[float]] = {op: [] for op in ENGINE_OPS}
    flags = docker_run_flags(args)
    for _ in range(repeats):
        t0 = time.monotonic()
        cid = await adapter.create_container(args)
        await adapter.start(cid)
        out["create_start"].append(time.monotonic() - t0)
        try:
            t0 = time.monotonic()
            result, _ = await adapter.exec_stream(cid, ["true"], timeout_s=60)
            out["exec_true"].append(time.monotonic() - t0)
            if result.exit_code != 0:
                raise TrialFailed(f"exec true exited {result.exit_code}")
            # The same `true` as a request to the container's PID 1 (what our trials use); the
            # first request also attaches, which an exec does not need.
            channel = ControlChannel(adapter, cid)
            await channel.run(["true"], limit_s=60)
            t0 = time.monotonic()
            answer = await channel.run(["true"], limit_s=60)
            out["control_request_true"].append(time.monotonic() - t0)
            channel.close()
            if answer.exit_code != 0:
                raise TrialFailed(f"control request true exited {answer.exit_code}")
        finally:
            t0 = time.monotonic()
            await adapter.remove(cid)
            out["remove"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        await _docker_run(flags, image, "true", b"")
        out["docker_run_true"].append(time.monotonic() - t0)
    return out


LIFECYCLES_PER_SAMPLE = 8  # container lifecycles between two readings of the CPU meter


async def lifecycle_cpu_seconds(
    adapter: DockerAdapter, meter: CpuMeter, args: dict[str, Any], repeats: int
) -> list[float]:
    """CPU-seconds (engine and containers) of one bare container lifecycle, alone: create,
    start and remove of an agent container whose PID 1 waits idle. A trial of ours pays two
    of these (agent and verifier) besides its work, whatever the design around them."""
    out: list[float] = []
    for _ in range(repeats):
        before = meter.sample()
        for _ in range(LIFECYCLES_PER_SAMPLE):
            cid = await adapter.create_container(args)
            try:
                await adapter.start(cid)
            finally:
                await adapter.remove(cid)
        cost = meter.sample().minus(before)
        if cost.engine_s is None or cost.containers_s is None:
            return []
        out.append((cost.engine_s + cost.containers_s) / LIFECYCLES_PER_SAMPLE)
    return out


# ---------------------------------------------------------------- the section


@dataclass
class SandboxRuns:
    """Every round, by system and concurrency, in run order."""

    rounds: dict[str, dict[int, list[RoundResult]]] = field(default_factory=dict)
    engine_ops: dict[str, list[float]] = field(default_factory=dict)
    lifecycle_cpu: list[float] = field(default_factory=list)  # CPU-s of one bare lifecycle
    cpu_unavailable: str | None = None  # why CPU time could not be split by owner
    profile: dict[str, Any] = field(default_factory=dict)  # our process in an extra round
    harbor_unavailable: str | None = None  # why Harbor did not run (None: it ran)
    gvisor_unavailable: str | None = None  # why ours did not also run under runsc

    def add(self, system: str, c: int, r: RoundResult) -> None:
        self.rounds.setdefault(system, {}).setdefault(c, []).append(r)


async def run_sandbox_section(
    tasks: list[Task],
    levels: list[int],
    repeats: int,
    log: Any,
    profile: bool = False,
    harbor_levels: tuple[int, ...] = (),
    build_harbor: bool = False,
) -> SandboxRuns:
    """Every system's rounds, interleaved per repeat and concurrency; then Harbor once per
    level in `harbor_levels` (its trials take tens of seconds each), where it can run
    (`build_harbor`: prepare its CLI first if missing)."""
    run = uuid.uuid4().hex[:10]
    adapter = TimedAdapter()
    resolver = ImageResolver(adapter)
    # Warm containers: one agent and one verifier container per trial in flight at the
    # highest level (they have pool keys of their own).
    pool = PoolSettings(warm_per_key=max(levels))
    backend = DockerBackend(BackendSettings(pool=pool), adapter=adapter, resolver=resolver)
    # Ours again with every container under gVisor (`--runtime runsc`): the price of the
    # kernel boundary, measured in the same rounds.
    runs = SandboxRuns()
    offered, _default = await engine_runtimes(adapter)
    gvisor = None
    if "runsc" in offered:
        settings = BackendSettings(pool=pool, runtime="runsc")
        gvisor = DockerBackend(settings, adapter=adapter, resolver=resolver)
    else:
        runs.gvisor_unavailable = "runsc is not registered with the engine (scripts/runsc_setup.sh)"
    floor = FloorContainers(adapter)
    labels = {"rollouts.rollout_id": f"bench-{run}", BENCH_LABEL: run}
    images = {t.id: await resolver.resolve(t) for t in tasks}
    args_for = {t.id: container_args(t, labels, images[t.id]) for t in tasks}
    meter = CpuMeter()
    meter.setup()
    runs.cpu_unavailable = meter.unavailable
    profiler = SelfProfile()
    if not profile:
        profiler.unavailable = "not profiled in this mode"
    try:
        for t in tasks:  # one floor container per slot and image, started once
            await floor.ensure(args_for[t.id], images[t.id], max(levels))
        # Warm-up (not measured), the same for every system: one trial per slot at the
        # highest concurrency (image resolution, first pool fill, page cache, the CLI's
        # and the engine's own caches).
        c = max(levels)
        warm = round_tasks(tasks, c)[:c]
        await ours_round(backend, adapter, warm, c, run)
        if gvisor is not None:
            await ours_round(gvisor, adapter, warm, c, run)
        await cold_round(args_for, images, warm, c)
        await floor_round(floor, images, warm, c)
        for rep in range(repeats):
            for c in levels:
                systems = (
                    ("ours", "ours_runsc", "cold", "floor") if gvisor else ("ours", "cold", "floor")
                )
                trials = round_tasks(tasks, c)
                for system in systems:
                    before = meter.sample()
                    if system == "ours":
                        r = await ours_round(backend, adapter, trials, c, run)
                    elif system == "ours_runsc":
                        r = await ours_round(gvisor, adapter, trials, c, run)  # type: ignore[arg-type]
                    elif system == "cold":
                        r = await cold_round(args_for, images, trials, c)
                    else:
                        r = await floor_round(floor, images, trials, c)
                    r.cpu = meter.sample().minus(before)
                    runs.add(system, c, r)
                    log(f"  sandbox rep {rep + 1} c={c} {system}: {r.per_min:.1f} trials/min")
        if profile:
            # An extra round, not measured: py-spy's sampling costs CPU and would be charged to
            # the rounds it watched.
            profiler.start()
            await ours_round(backend, adapter, round_tasks(tasks, max(levels)), max(levels), run)
            profiler.stop()
        if harbor_levels:
            from benchmarks.harbor_baseline import harbor_available, harbor_round

            runs.harbor_unavailable = harbor_available(build=build_harbor)
            if runs.harbor_unavailable:
                log(f"  harbor: skipped: {runs.harbor_unavailable}")
        for c in harbor_levels if not runs.harbor_unavailable else ():
            before = meter.sample()
            trials = round_tasks(tasks, c, distinct=True)
            originals = round_tasks(tasks, c)
            copies = {t.id: images[o.id] for t, o in zip(trials, originals, strict=True)}
            r = await harbor_round(trials, c, copies, log=log)
            r.cpu = meter.sample().minus(before)
            runs.add("harbor", c, r)
            log(f"  sandbox c={c} harbor: {r.per_min:.1f} trials/min")
        # What each engine operation costs here, alone (after the rounds: same warm state).
        runs.engine_ops = await engine_op_seconds(
            adapter, args_for[tasks[0].id], images[tasks[0].id], repeats=5
        )
        if not runs.cpu_unavailable:
            runs.lifecycle_cpu = await lifecycle_cpu_seconds(
                adapter, meter, args_for[tasks[0].id], repeats=min(repeats, 3)
            )
    finally:
        await floor.aclose()
        await backend.aclose()
        if gvisor is not None:
            await gvisor.aclose()
    runs.profile = profiler.summary()
    return runs
