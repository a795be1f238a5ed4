"""One group of samples of one task: the shared first turn, then per sample its sandbox and the
multi-turn agent loop, policy <-> sandbox, under the agent's clock, then the verifier and the
trajectory. The turns themselves, token by token, are episode_turns.py's. Every sample ends as a
Trajectory; faults become masked statuses, never exceptions."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sandboxes.backend import (
    AgentCausedSandboxFault,
    KnownBlobs,
    Sandbox,
    SandboxBackend,
    Verdict,
    VerifyResult,
)
from sandboxes.calibration import Calibration, Calibrator
from sandboxes.task import Task
from service.agent.harnesses import Harness, ProfileError, build_harnesses
from service.agent.harnesses.sandbox_terminal import SandboxTerminal
from service.agent.tokens import InvariantError, TokenLedger
from service.agent_clock import MAX_HOLD_S, AgentClock
from service.episode_summary import EpisodeSummaries
from service.episode_turns import Episode, EpisodeTurns, policy_failed, turn_seed
from service.policy.client import ContextLengthError, PolicyClient, PolicyError, PolicyFault
from service.policy.generations import Generation
from service.policy.holds import Holds, PauseProbe
from service.sample import UNCALIBRATED_DROP, SampleSpec
from service.store.workspaces import KeptWorkspace, pack_snapshot
from service.trajectory import (
    Grading,
    Message,
    OnEpisodeEnd,
    OnStart,
    OnTrajectory,
    Status,
    Trajectory,
    VerifierFile,
    empty_trajectory,
)

log = logging.getLogger(__name__)

# Episodes that ended on the model's side are graded; infrastructure faults are not.
_VERIFIED_STATUSES = frozenset({Status.ok, Status.agent_timeout, Status.context_length})
# The sandbox layer's verdicts as trajectory statuses: the one place the two vocabularies meet.
_STATUS_OF_VERDICT = {
    Verdict.graded: Status.ok,
    Verdict.agent_timeout: Status.agent_timeout,
    Verdict.tests_timeout: Status.verifier_timeout,
    Verdict.tests_broken: Status.verifier_error,
    Verdict.infrastructure: Status.sandbox_error,
}


def status_of(verdict: Verdict) -> Status:
    return _STATUS_OF_VERDICT[verdict]


def _seed_runs(samples: list[SampleSpec]) -> list[list[int]]:
    """The samples' positions in runs that can share one n-sample first request: all of them
    when unseeded, else runs of consecutive seeds (a group's samples started together, unless
    some of them ran before)."""
    if samples[0].seed is None:
        return [list(range(len(samples)))]
    runs: list[list[int]] = []
    for i, spec in enumerate(samples):
        prev = samples[runs[-1][-1]].seed if runs else None
        if prev is not None and spec.seed == prev + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


@dataclass
class _FirstTurn:
    server: str  # where the group's first turn ran: its samples' prefix is cached there
    version: int  # the policy version when the group started
    prompt_ids: list[int] = field(default_factory=list)
    generations: list[Generation] = field(default_factory=list)
    error: PolicyFault | None = None
    seconds: float = 0.0
    held_s: float = 0.0  # of `seconds`, held by paused servers


def graded_status(status: Status, mask_agent_timeout: bool) -> Status:
    """The status of a sample whose episode ended with `status` when its verifier grades it (a
    timed-out agent is `cancelled` when its request masks agent timeouts). Regrades use it too."""
    if status is Status.agent_timeout and mask_agent_timeout:
        return Status.cancelled
    return status


class EpisodeRunner:
    def __init__(
        self,
        policy: PolicyClient,
        sandboxes: SandboxBackend,
        *,
        current_version: Callable[[], int] = lambda: 0,
        chat_template_kwargs: dict[str, Any] | None = None,
        harnesses: Mapping[str, Harness] | None = None,
        default_harness: str = "default",
        calibrator: Calibrator | None = None,
        max_hold_s: float = MAX_HOLD_S,
    ) -> None:
        """`chat_template_kwargs`: for samples whose spec names none (the service default).
        `harnesses`: the conversation formats samples may name (default: the shipped ones,
        `default` and `tools`); `default_harness`: for samples whose spec names none.
        `calibrator`: grades each task's oracle at its first use; the samples of a task whose
        oracle does not score 1 unflagged are graded in the fallback, or dropped (their
        spec's `uncalibrated`). None: every sample through the boundary.
        `max_hold_s`: how long a paused policy server may hold a sample's generation request
        before the sample is masked (policy_error) and re-run (service/agent_clock.py)."""
        self.policy = policy
        self.sandboxes = sandboxes
        self.current_version = current_version
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.turns = EpisodeTurns(policy, self.template_kwargs)
        self.harnesses = dict(harnesses) if harnesses is not None else build_harnesses()
        self.default_harness = default_harness
        self.max_hold_s = max_hold_s
        # One question per server and poll interval, however many samples wait on it.
        self._probe = PauseProbe(policy.fleet, policy.pause_poll_s)
        self.harness_for(None)  # the default must exist
        self.calibrator = calibrator
        self.known_blobs: KnownBlobs | None = None  # set: final workspaces are kept

    def with_policy(
        self, policy: PolicyClient, current_version: Callable[[], int]
    ) -> EpisodeRunner:
        """This runner on other policy servers (a request's own: service/policy/named.py),
        sharing everything else with it."""
        other = copy.copy(self)
        other.policy = policy
        other.current_version = current_version
        other.turns = EpisodeTurns(policy, other.template_kwargs)
        other._probe = PauseProbe(policy.fleet, policy.pause_poll_s)
        return other

    def keep_workspaces(self, known_blobs: KnownBlobs | None) -> None:
        """Keep each verified sample's final workspace with its trajectory (the store's
        `known_blobs` says which files it holds already); None: keep none."""
        self.known_blobs = known_blobs

    def harness_for(self, spec: SampleSpec | None) -> Harness:
        """The harness a sample speaks: its request's, or the service's default."""
        name = (spec.agent.harness if spec is not None else None) or self.default_harness
        try:
            return self.harnesses[name]
        except KeyError:
            have = ", ".join(sorted(self.harnesses))
            hint = " (start the service with --agent-profile FILE)" if name == "terminus-2" else ""
            raise ProfileError(f"no harness {name!r} here{hint}; available: {have}") from None

    def template_kwargs(self, spec: SampleSpec) -> dict[str, Any]:
        """The chat template's keyword arguments for this sample: its request's, or the
        service's default."""
        if spec.chat_template_kwargs is not None:
            return dict(spec.chat_template_kwargs)
        return dict(self.chat_template_kwargs)

    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: OnTrajectory,
        on_episode_end: OnEpisodeEnd | None = None,
        on_start: OnStart | None = None,
    ) -> None:
        """The samples' first turn is shared (one n-sample request); each sample's sandbox and
        episode begin once `on_start(trajectory_id)` returns (its slot: the scheduler's)."""
        if not samples:
            return
        # Calibration starts with the task's first group and runs while its samples do; only
        # grading waits for it, or the start where uncalibrated tasks are dropped.
        calibration = self.calibrator.start(task) if self.calibrator is not None else None
        if calibration is not None and samples[0].uncalibrated == UNCALIBRATED_DROP:
            cal = await asyncio.shield(calibration)  # shared: a cancelled group leaves it be
            if cal is not None and not cal.calibrated:
                for spec in samples:
                    await on_trajectory(self._dropped(spec, cal))
                return
        harness = self.harness_for(samples[0])  # one request: one harness for the group
        messages = [Message(**m) for m in harness.first_messages(task.instruction)]
        started = time.monotonic()
        # Sandboxes start while the first turn generates (for the samples that hold their
        # slot by then): creation is off the critical path.
        sandbox_tasks = [
            asyncio.create_task(self._create_sandbox(task, spec, on_start)) for spec in samples
        ]
        try:
            first = await self._first_turn(samples, messages, harness)
        except BaseException:
            for t in sandbox_tasks:
                t.cancel()
            await asyncio.gather(*sandbox_tasks, return_exceptions=True)
            await self._destroy_created(sandbox_tasks)
            raise
        # Every sample runs to its end even if another one's report fails: a sibling's error
        # must not cost the others their real results. The first error is raised afterwards,
        # and the caller records the samples that never reported.
        results = await asyncio.gather(
            *(
                self._run_sample(
                    task,
                    spec,
                    i,
                    harness,
                    messages,
                    first,
                    sandbox_task,
                    on_trajectory,
                    on_episode_end,
                    started,
                    calibration,
                )
                for i, (spec, sandbox_task) in enumerate(zip(samples, sandbox_tasks, strict=True))
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def _dropped(self, spec: SampleSpec, cal: Calibration) -> Trajectory:
        why = (
            f"[rollouts] not run: task {cal.task_id} is uncalibrated ({cal.why}) and the "
            "request drops uncalibrated tasks"
        )
        return empty_trajectory(
            spec.trajectory_id, spec.rollout_id, spec.group_id, spec.task_id,
            spec.sample_index, self.current_version(), Status.cancelled, why,
        )  # fmt: skip

    async def _destroy_created(self, sandbox_tasks: list[asyncio.Task]) -> None:
        for t in sandbox_tasks:
            if t.done() and not t.cancelled() and t.exception() is None:
                await self.sandboxes.destroy(t.result()[0])

    async def _create_sandbox(
        self, task: Task, spec: SampleSpec, on_start: OnStart | None
    ) -> tuple[Sandbox, float]:
        if on_start is not None:
            await on_start(spec.trajectory_id)
        t0 = time.monotonic()
        labels = {
            "rollouts.rollout_id": spec.rollout_id,
            "rollouts.trajectory_id": spec.trajectory_id,
        }
        sandbox = await self.sandboxes.create(task, labels)
        return sandbox, time.monotonic() - t0

    async def _first_turn(
        self, samples: list[SampleSpec], messages: list[Message], harness: Harness
    ) -> _FirstTurn:
        """One tokenize and one n-sample request share the prompt prefix of the samples (one
        request per run of consecutive seeds: see _seed_runs). A request held by a paused
        server longer than `max_hold_s` ends it as a policy fault (no agent clock runs yet)."""
        spec0 = samples[0]
        group_key = f"{spec0.rollout_id}/{spec0.group_id}"
        first = _FirstTurn(server=self.policy.pin(group_key), version=self.current_version())
        holds = Holds(self.policy.fleet)
        clock = self._clock(holds, None)  # no agent yet: only the bound on holds
        t0 = time.monotonic()
        try:
            async with clock.running():
                await self._first_generations(first, samples, messages, harness, group_key, holds)
        except PolicyFault as e:
            first.error = e
        except TimeoutError:
            if clock.held_too_long is None:  # not the clock's: it has no budget here
                raise
            first.error = PolicyError(f"first turn: {clock.held_too_long}")
        finally:
            first.server = self.policy.pin(group_key)  # a retry may have moved the group
            self.policy.release(group_key)
        first.seconds = time.monotonic() - t0
        first.held_s = holds.total_s()
        return first

    def _clock(self, holds: Holds, budget_s: float | None) -> AgentClock:
        return AgentClock(
            holds,
            self._probe,
            budget_s=budget_s,
            max_hold_s=self.max_hold_s,
            poll_s=self.policy.pause_poll_s,
        )

    async def _first_generations(
        self,
        first: _FirstTurn,
        samples: list[SampleSpec],
        messages: list[Message],
        harness: Harness,
        group_key: str,
        holds: Holds,
    ) -> None:
        spec0 = samples[0]
        await self.policy.start()  # no-op once the model is known; the server may start late
        first.prompt_ids = await self.policy.tokenize_messages(
            [m.model_dump() for m in messages],
            chat_template_kwargs=self.template_kwargs(spec0),
            tools=harness.tools(),
            sample=group_key,
        )
        budget = self.turns.budget(len(first.prompt_ids), spec0.sampling.max_tokens)

        async def run(positions: list[int]) -> list[Generation]:
            seed = turn_seed(samples[positions[0]].seed, 0)
            params = replace(spec0.sampling, seed=seed, max_tokens=budget)
            return await self.policy.complete(
                first.prompt_ids, params, n=len(positions), sample=group_key, holds=holds
            )

        by_position: dict[int, Generation] = {}
        for positions in _seed_runs(samples):  # one run, unless some samples ran before
            by_position.update(zip(positions, await run(positions), strict=True))
        first.generations = [by_position[i] for i in range(len(samples))]

    async def _run_sample(
        self,
        task: Task,
        spec: SampleSpec,
        position: int,
        harness: Harness,
        messages: list[Message],
        first: _FirstTurn,
        sandbox_task: asyncio.Task,
        on_trajectory: OnTrajectory,
        on_episode_end: OnEpisodeEnd | None,
        started: float,
        calibration: asyncio.Future[Calibration | None] | None,
    ) -> None:
        ep = Episode(
            spec=spec,
            harness=harness,
            ledger=TokenLedger(prompt_ids=list(first.prompt_ids)),
            messages=list(messages),
            version=first.version,
            holds=Holds(self.policy.fleet),
        )
        ep.timings.generate_s += first.seconds
        sandbox: Sandbox | None = None
        verify: VerifyResult | None = None
        self.policy.pin(spec.trajectory_id, first.server)
        try:
            try:
                if first.error is not None and not isinstance(first.error, ContextLengthError):
                    # No episode and no grading to come: no need to wait for its slot.
                    sandbox_task.cancel()
                    (made,) = await asyncio.gather(sandbox_task, return_exceptions=True)
                    if isinstance(made, tuple):  # made before the cancel landed: destroyed below
                        sandbox = made[0]
                else:
                    sandbox, ep.timings.create_s = await sandbox_task
            except Exception as e:  # engine unreachable, image missing, container died
                ep.status = Status.sandbox_error
                ep.messages.append(Message(role="system", content=f"sandbox error: {e}"))
                if first.error is None:  # its first turn was generated: keep it on record
                    gen = first.generations[position]
                    ep.ledger.add_generation(
                        list(first.prompt_ids), gen.token_ids, gen.logprobs, gen.versions
                    )
            if ep.status is Status.ok and first.error is not None:
                policy_failed(ep, first.error)
            elif ep.status is Status.ok and sandbox is not None:
                await self._agent_loop(task, ep, sandbox, first.generations[position])
            if sandbox is not None and ep.status in _VERIFIED_STATUSES:
                if on_episode_end is not None:  # the next sample may generate meanwhile
                    await on_episode_end(spec.trajectory_id)
                verify = await self._verify(task, ep, sandbox, calibration)
                sandbox = None
        except asyncio.CancelledError:
            ep.status = Status.cancelled
            raise
        finally:
            self.policy.release(spec.trajectory_id)
            if sandbox is not None:
                t0 = time.monotonic()
                await self.sandboxes.destroy(sandbox)
                ep.timings.teardown_s += time.monotonic() - t0
        ep.timings.total_s = time.monotonic() - started
        ep.timings.held_s = first.held_s + ep.holds.total_s()
        await on_trajectory(_trajectory(task, ep, verify, self.template_kwargs(spec)))

    async def _agent_loop(
        self, task: Task, ep: Episode, sandbox: Sandbox, first: Generation
    ) -> None:
        limits = ep.spec.agent
        timeout_s = limits.timeout_s or task.config.agent_timeout_sec
        session = ep.harness.session(max_tokens=ep.spec.sampling.max_tokens)
        terminal = SandboxTerminal(sandbox)
        if ep.harness.summarizer is not None:
            first_user = next(m.content for m in ep.messages if m.role == "user")
            ep.summaries = EpisodeSummaries(
                self.turns, ep.harness.summarizer, task.instruction, first_user
            )
        # Starts after the first turn: its generation, and the time a pause held it, are not
        # the agent's.
        clock = self._clock(ep.holds, timeout_s)
        try:
            async with clock.running():
                t0 = time.monotonic()
                await session.start(terminal)
                ep.timings.agent_s += time.monotonic() - t0
                await self.turns.run(ep, session, terminal, first)
        except TimeoutError:
            if clock.held_too_long is not None:  # the policy's fault: masked and re-run
                policy_failed(ep, PolicyError(clock.held_too_long))
            else:
                ep.ledger.rewind_to_last_generation()
                ep.status = Status.agent_timeout
        except InvariantError as e:
            # The engine's answer did not line up with what we sent: never train on it.
            self.policy.stats.discarded_tokens += ep.ledger.generated
            ep.ledger = TokenLedger(prompt_ids=ep.ledger.prompt_ids)
            ep.summaries = None  # none of its segments is trained either
            ep.status = Status.policy_error
            ep.messages.append(Message(role="system", content=f"token invariant broken: {e}"))
        except PolicyFault as e:  # e.g. decoding a reply that ended on a stop string
            policy_failed(ep, e)
        except AgentCausedSandboxFault as e:
            # The agent wrecked its own sandbox: the episode ends and is graded (0 once the
            # workspace is gone), never masked, or wrecking it would beat an honest 0.
            ep.ledger.rewind_to_last_generation()
            ep.messages.append(Message(role="system", content=f"sandbox broken by the agent: {e}"))
        except Exception as e:  # removed from outside, or the engine went away mid-episode
            ep.ledger.rewind_to_last_generation()
            ep.status = Status.sandbox_error
            ep.messages.append(Message(role="system", content=f"sandbox error: {e}"))

    async def _verify(
        self,
        task: Task,
        ep: Episode,
        sandbox: Sandbox,
        calibration: asyncio.Future[Calibration | None] | None,
    ) -> VerifyResult:
        t0 = time.monotonic()
        try:
            workspace = await sandbox.get_workspace()
        except AgentCausedSandboxFault as e:  # workspace over the cap, container exited
            await self.sandboxes.destroy(sandbox)
            return VerifyResult(0.0, Verdict.graded, f"[rollouts] graded 0: {e}")
        except Exception as e:
            await self.sandboxes.destroy(sandbox)
            return VerifyResult(None, Verdict.infrastructure, str(e))
        t1 = time.monotonic()
        await self.sandboxes.destroy(sandbox)
        ep.timings.teardown_s += time.monotonic() - t1
        labels = {
            "rollouts.rollout_id": ep.spec.rollout_id,
            "rollouts.trajectory_id": ep.spec.trajectory_id,
        }
        if self.known_blobs is not None:  # before verify: on Ray, verify releases it
            ep.kept = await self._keep(workspace, ep, self.known_blobs)
        # A task whose oracle fails through the boundary is graded in the fallback, flagged
        # `unguarded`, rather than 0 whatever the agent did (sandboxes/calibration.py).
        cal = await asyncio.shield(calibration) if calibration is not None else None  # shared
        plain = cal is not None and not cal.calibrated
        result = await self.sandboxes.verify(task, workspace, labels, plain=plain)
        ep.timings.verify_s += time.monotonic() - t0
        return result

    async def _keep(
        self, workspace: bytes, ep: Episode, known_blobs: KnownBlobs
    ) -> KeptWorkspace | None:
        """The workspace the verifier is about to receive, for regrading. Failing to keep it
        costs the sample nothing but its regrades."""
        status = graded_status(ep.status, ep.spec.agent.mask_agent_timeout)
        try:
            snapshot = await self.sandboxes.snapshot(workspace, known_blobs)
            return await asyncio.to_thread(pack_snapshot, snapshot, status.value)
        except Exception as e:  # noqa: BLE001 - a node gone, a store hiccup: grade all the same
            log.warning("%s: final workspace not kept: %s", ep.spec.trajectory_id, e)
            return None


def _trajectory(
    task: Task, ep: Episode, verify: VerifyResult | None, chat_template_kwargs: dict[str, Any]
) -> Trajectory:
    """The sample's record, from its episode and its verifier's result (None: not verified)."""
    status, reward = ep.status, None
    output = ""
    if verify is not None:
        output = verify.output
        reward = verify.reward
        if verify.verdict is not Verdict.graded:
            # The verifier's verdict (timeout, error, crash) outranks how the agent ended.
            status = status_of(verify.verdict)
        else:
            status = graded_status(status, ep.spec.agent.mask_agent_timeout)
    ep.ledger.validate()
    segments = ep.summaries.segments(ep.ledger) if ep.summaries is not None else []
    # The oldest and newest weights behind its generated tokens, in every segment (staleness
    # counts from the oldest); a sample that generated nothing, the version it started under.
    versions = [seg.response_policy_versions for seg in segments] or [ep.ledger.versions]
    generated = [v for vs in versions for v in vs if v >= 0] or [ep.version]
    files = [
        VerifierFile(path=path, content=content)
        for path, content in (verify.files.items() if verify is not None else ())
    ]
    gradings = []
    if verify is not None and verify.verdict is not Verdict.infrastructure:
        gradings.append(
            Grading(
                reward=reward,
                status=status,
                reward_flags=list(verify.flags),
                verifier_files=files,
                grader_version=verify.grader_version,
                tests_digest=verify.tests_digest or task.tests_digest,
                graded_at=time.time(),
            )
        )
    trajectory = Trajectory(
        trajectory_id=ep.spec.trajectory_id,
        rollout_id=ep.spec.rollout_id,
        group_id=ep.spec.group_id,
        task_id=task.id,
        sample_index=ep.spec.sample_index,
        policy_version_start=min(generated),
        policy_version_end=max(generated),
        prompt_token_ids=ep.ledger.prompt_ids,
        response_token_ids=ep.ledger.response_ids,
        loss_mask=ep.ledger.loss_mask,
        rollout_logprobs=ep.ledger.logprobs,
        response_policy_versions=ep.ledger.versions,
        segments=segments,
        reward=reward,
        status=status,
        stop_reason=ep.stop_reason,
        num_turns=ep.num_turns,
        messages=ep.messages,
        verifier_output=output,
        reward_flags=list(verify.flags) if verify is not None else [],
        verifier_files=files,
        timings=ep.timings,
        sampling=ep.spec.sampling,
        chat_template_kwargs=chat_template_kwargs,
        harness=ep.harness.name,
        harness_profile_hash=ep.harness.profile.hash,
        sample_seed=ep.spec.seed,
        tests_digest=gradings[-1].tests_digest if gradings else task.tests_digest,
        gradings=gradings,
    )
    trajectory._workspace = ep.kept
    return trajectory
