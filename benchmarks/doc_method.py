"""The method sections of docs/performance.md ("Reproduce", "What is measured"): how the
benchmarks are run and what each one measures, from the benchmark code's own constants (no
results file needed)."""

from __future__ import annotations

from benchmarks.doc_text import item, para, wave_count


def method_sections() -> list[str]:
    """The blocks of "Reproduce" and "What is measured"."""
    from benchmarks.datapath import (
        DRAIN_LEASE_GROUPS,
        N_SAMPLES,
        PIPELINE_LEASE_GROUPS,
        RSS_SAMPLE_S,
        TOKEN_SAMPLE_GROUPS,
        WARMUP_GROUPS,
    )
    from benchmarks.datapath_service import (
        MAX_CONCURRENT_SAMPLES,
        PROMPT_TOKENS,
        RESPONSE_TOKENS,
        TEMPLATES,
    )
    from benchmarks.overlap import LONG_TAIL as OVERLAP_LONG_TAIL
    from benchmarks.overlap import MAX_TOKENS as OVERLAP_MAX_TOKENS
    from benchmarks.plan import FULL, QUICK, SECTIONS
    from benchmarks.sandbox_throughput import LIFECYCLES_PER_SAMPLE
    from benchmarks.sqlite_pages import BLOB_BYTES, PAGE_SIZES, PER_TRANSACTION

    blocks: list[str] = []
    add = blocks.append
    add("## Reproduce")
    add(
        "```bash\n"
        f"python -m benchmarks            # full mode: {FULL.repeats} interleaved repeats "
        f"({FULL.overlap_repeats} of the overlap batch)\n"
        f"python -m benchmarks --quick    # tiny sizes, {QUICK.repeats} repeat (the smoke test)\n"
        f"python -m benchmarks --only datapath   # one section: {' | '.join(SECTIONS)}\n"
        "python -m benchmarks.report --doc      # this file, from benchmarks/results/latest.json\n"
        "```"
    )
    add(para(
        "Run it from the repository root with the venv's Python (`.venv/bin/python`), on a",
        "machine with nothing else running: the load average before and after the run is",
        "recorded and shown below. Docker and the sandbox base image are needed for the",
        "`sandbox` and `overlap` sections. The runner writes `benchmarks/results/latest.md` and",
        "`latest.json`: each headline figure as a plain number (the median) under its key;",
        "`figures` with each one's median, min, max, runs, target and whether it was met; and",
        "`details`. The Harbor baseline needs Harbor's CLI, which",
        "`scripts/harbor_cli_env.sh` installs under `~/.cache/rollouts` (a pinned Python 3.12+",
        "venv and the `docker compose` v2 plugin from Debian's packages; the full mode runs it",
        "once, about 2 minutes); the quick mode uses it only if it is there, and without it the",
        "baseline is skipped and the results say why.",
    ))  # fmt: skip

    add("## What is measured")
    add(para(
        "**1. Sandbox throughput** (`benchmarks/sandbox_throughput.py`). Trials are oracle",
        "verifications: the task's `solution/solve.sh`, then its tests in a fresh container;",
        "every trial must reach reward 1.0 or the benchmark fails. The bundled tasks run at",
        f"concurrency {', '.join(map(str, FULL.levels))} (full mode: {FULL.sandbox_tasks}",
        "tasks, taken in turn, at least twice as many trials a round as its concurrency, so",
        "that every level fills). Three systems run on the same image with the same",
        "isolation flags, their rounds interleaved within each repeat, and each first gets the",
        "same unmeasured warm-up round:",
    ))  # fmt: skip
    add("\n".join([
        item("*ours*: `run_oracle` through `DockerBackend`, with a warm pool of one agent and",
             "one verifier container per trial in flight at the highest concurrency. A round",
             "is timed until the pool has finished its background removals and refills, so it",
             "pays for its own teardown."),
        item("*cold*: what a simple harness does: two `docker run --rm -i` CLI calls per",
             "trial, one for the solve (files in and the workspace out as tar on",
             "stdin/stdout), one for the tests; no pool. The flags are derived from",
             "`isolation.container_args`; `--network none` stands for its `network_disabled`,",
             "which the CLI cannot ask for (the same isolation, but the engine still sets up a",
             "libnetwork sandbox per container, and ours skips that)."),
        item("*floor*: the same solve and tests as one `docker exec` in an already running",
             "container; no container is created or removed. The cost of the work itself."),
        item("*Harbor 0.25* (where it can be installed, `benchmarks/harbor_baseline.py`):",
             "Harbor's own CLI with its oracle agent and docker environment on the same tasks",
             "and base image, whole CLI runs, once per concurrency (it is slow)."),
    ]))  # fmt: skip
    add(para(
        "Around every round the section reads the CPU time spent, by owner",
        "(`benchmarks/cpu_cost.py`): the engine (dockerd, containerd, the shims, runc and the",
        "storage driver's helpers, moved once into cgroup v1 `cpuacct` groups of their own, so",
        "short-lived helpers they start are counted too; dockerd with what it starts, and",
        "containerd with the shims and runc, apart), everything inside the containers",
        "(the engine's parent group of all containers, which keeps the usage of removed ones),",
        "and the harness process with the children it waited for (the `docker` CLI of the cold",
        "harness). In one more round of ours at the highest concurrency, not measured (the",
        "sampling costs CPU), py-spy samples our process from outside",
        "(`benchmarks/self_profile.py`) and charges each sample to the innermost frame of a",
        "known group (the docker SDK, the HTTP client, tar, the event loop, our code).",
    ))  # fmt: skip
    add(para(
        "Our stage p50 and p95 come from the oracle's durations: create, agent (one exec for",
        "upload + solve, one for the workspace tar), verify (acquire, then one attached run of",
        "the verifier script: upload, tests, evidence) and teardown (each removal, timed in the",
        "adapter). The headline ratios are ours/floor and ours/cold at the concurrency where",
        "*ours* is fastest, per repeat, then the median, and ours/cold at the concurrency where",
        "it is lowest (target ≥ 1 at every concurrency). After the rounds",
        "the section times each engine operation alone (create + start, `docker exec` of",
        "`true`, remove, `docker run --rm` of `true`) and counts the engine calls our trials",
        "made; then it reads the CPU-seconds of one bare container lifecycle (create, start",
        f"and remove of an agent container whose PID 1 waits idle; {LIFECYCLES_PER_SAMPLE} in a",
        "row between two readings of the same meter), which bounds what any design with a",
        "fresh agent and a fresh verifier container can reach against the floor.",
    ))  # fmt: skip
    add(para(
        "**2. One agent command** (`benchmarks/command_rtt.py`). What a multi-turn episode pays",
        f"10 to 30 times: in one sandbox, {FULL.command_rounds} interleaved rounds of `echo`",
        "typed into the terminal (`send_keys`, returning once the shell is back at its prompt",
        "with the output), a bare exec of the same `echo` through the same engine connection",
        "(create, start, read, inspect: the least an exec-based harness pays) and the",
        "`docker exec` CLI; p50 and p95 of each. Target: the terminal's p50 within 30 ms of",
        "the bare exec's.",
    ))  # fmt: skip
    full_waves = wave_count(FULL.overlap_tasks, FULL.overlap_n, FULL.overlap_concurrency)
    add(para(
        "**3. Pipeline overlap** (`benchmarks/overlap.py`). `collect` runs a batch of",
        f"{FULL.overlap_tasks} tasks × n={FULL.overlap_n} with {FULL.overlap_concurrency}",
        f"samples in flight (the batch is {full_waves} times that, as an RL step's batch is",
        "several times what is in flight. With fewer in flight, the moments when every one of",
        "them is in its sandbox at once, so that nothing generates, come more often; a GPU",
        "deployment keeps many more in flight. A sample's slot is freed when its episode ends,",
        "so the next sample generates while the one before verifies.) It runs against the",
        "stand-in policy (p_correct 1, no",
        f"malformed replies, and `--long-tail {OVERLAP_LONG_TAIL}`: each sample draws its",
        "verbosity once from a lognormal of that sigma, which sets its filler words per reply",
        "and the turns it spends looking around before writing the solution, so a few samples",
        "run many more turns and tokens than the median, as real episodes do; its replies'",
        f"p99 is about 9× their median at {OVERLAP_MAX_TOKENS} tokens a turn). The request is",
        "seeded, so every run gets the same batch. It runs under two dispatches side by side:",
        "the scheduler's own, by the slot (a free slot starts a sample at once; a group's",
        "samples not yet started share one first request), and the one before it, by the",
        "chunk (`benchmarks/chunk_dispatch.py`: a group's next chunk waits until as many slots",
        "as it has samples are free). Under each, three ways,",
        f"{FULL.overlap_repeats} times, interleaved:",
    ))  # fmt: skip
    add("\n".join([
        item("end to end: the stand-in at a fixed decode throughput that all requests in",
             "flight share, in arrival order (`--shared-decode`: one engine, as a GPU serving a",
             "batch), real sandboxes;"),
        item("generation alone: the same stand-in, sandboxes replaced by",
             "`benchmarks/noop_backend.py`, whose sandboxes answer at once and whose verifier",
             "gives 1.0 only if the keystrokes the agent sent deliver the task's oracle",
             "`solve.sh` to bash (whole, or in parts);"),
        item("sandboxes alone: an instant stand-in (no decode delay), real sandboxes."),
    ]))  # fmt: skip
    add(para(
        "Every run must score 1.0 on every sample. The figure is `end_to_end / max(generation",
        "alone, sandboxes alone)`: 1.0 is perfect overlap, 2.0 full serialisation of two equal",
        "halves. So that the target (≤ 1.15) can tell the two apart, the decode speed is first",
        "calibrated so that generation alone lasts about as long as sandboxes alone (sandboxes",
        "alone and instant generation, the episode loop's own time, are timed once; then",
        "generation alone at a trial speed, twice, each time moving the speed to where 1/speed",
        "scaling says the halves would match, under the scheduler's dispatch); the balance of",
        "the two halves is reported beside the ratio. Beside it, the policy occupancy of the",
        "end-to-end runs: the mean number of sequences in flight at the policy over the run,",
        "divided by the sample slots (what a GPU's batch is made of; a choice counts from its",
        "request's start to its own last token, `benchmarks/timeline.py`).",
    ))  # fmt: skip
    add(para(
        "**4. Service data path** (`benchmarks/datapath.py`). The real service runs in its own",
        "process (`benchmarks/datapath_service.py`: `create_app` with a synthetic group runner",
        f"that hands each sample a finished trajectory of {PROMPT_TOKENS:,} prompt and",
        f"{RESPONSE_TOKENS:,} response tokens, generated turns alternating with observations,",
        f"and the chat messages as text; {TEMPLATES} distinct records). Everything past the",
        "episode is real: `POST /v1/rollouts`, the scheduler (`max_concurrent_samples`",
        f"{MAX_CONCURRENT_SAMPLES}), the store's commit path (SQLite, group commit,",
        "`synchronous=FULL`, advantages), leases and acks over loopback HTTP; the benchmark",
        "process is the trainer. Per repeat, on a fresh data dir, after an unmeasured",
        f"warm-up rollout ({WARMUP_GROUPS * N_SAMPLES} trajectories leased as Arrow and JSON:",
        "the process's first lease pays one-off imports, not a per-trajectory cost):",
    ))  # fmt: skip
    add("\n".join([
        item(f"*Pipeline*: {FULL.pipeline_trajectories:,} trajectories are committed while",
             f"the trainer drains them with Arrow leases of up to {PIPELINE_LEASE_GROUPS}",
             "groups: trajectories/s, and the service's CPU-ms per trajectory read from",
             "`/proc` (which load on the machine does not inflate).", mark="1."),
        item(f"*Fill*: {FULL.stored_trajectories:,} more are committed: commits/s, then the",
             "service's RSS with all of them stored (and its peak during the fill).",
             mark="2."),
        item(f"*Token arrays*: {TOKEN_SAMPLE_GROUPS * N_SAMPLES} of them are leased as Arrow,",
             "left to expire, and leased again as JSON: the bytes of their four token arrays",
             "(prompt and response ids, loss mask, logprobs) in the API's JSON body, against",
             "the same columns as the API encodes them in Arrow IPC (zstd) and, for",
             "comparison, with lz4 and uncompressed. Token ids are uniform over Qwen3's",
             "vocabulary: the worst case for compression.", mark="3."),
        item(f"*Drain*: the rest are leased in batches of {DRAIN_LEASE_GROUPS} groups,",
             "alternating JSON and Arrow, and acked: time to first byte, whole-batch time and",
             "bytes per trajectory per format, and the RSS peak (sampled every",
             f"{RSS_SAMPLE_S:g} s).", mark="4."),
    ]))  # fmt: skip
    add(para(
        "The section also times SQLite alone (`benchmarks/sqlite_pages.py`): commits/s of",
        f"{BLOB_BYTES // 1000} KB incompressible blobs, {PER_TRANSACTION} per transaction, WAL",
        "and `synchronous=FULL`, at page sizes of",
        ", ".join(f"{p // 1024} KiB" for p in PAGE_SIZES) + ".",
    ))  # fmt: skip
    return blocks
