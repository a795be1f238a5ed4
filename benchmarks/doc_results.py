"""The sections of docs/performance.md on the committed run ("Results", "What was
optimised"): what it measured, and the figures of it that show where each change stands."""

from __future__ import annotations

from typing import Any

from benchmarks.doc_text import NOT_RUN, item, para, text_of
from benchmarks.results_tables import fig_text, render_results


def results_sections(r: dict[str, Any]) -> list[str]:
    """The blocks of "Results" and "What was optimised", read from the results `r`."""
    from benchmarks.sqlite_pages import BLOB_BYTES

    d = r["details"]
    sb, ov, dp = d.get("sandbox", {}), d.get("overlap", {}), d.get("datapath", {})
    methods = r.get("methods", {})
    blocks: list[str] = []
    add = blocks.append

    add("## Results")
    # Judged by the load before the run only: the load after is mostly the run's own (it keeps
    # every core busy), so it would call every full run a busy machine.
    quiet = r["load_before"] < 0.5 * r["cores"]
    load = (
        "a quiet machine."
        if quiet
        else "**not a quiet machine** by the load average at its start (the last minute's "
        "work, whether it ended before the run or ran beside it), so the timings below may be "
        "pessimistic; the ratios between systems measured side by side are what to read."
    )
    add(para(
        f"The committed run: {r['mode']} mode, {r['date']}, {r['cores']} cores",
        f"({r['machine']}), wall time {r['wall_s']:.0f} s; load average",
        f"{r['load_before']:.1f} before and {r['load_after']:.1f} after:", load,
    ))  # fmt: skip
    add(render_results(r).split("\n", 4)[4].strip())  # the tables, without the run's line
    notes = []
    if "baseline_warmup" not in methods and sb:
        notes.append("only *ours* had a warm-up round; the cold and floor baselines started cold")
    if "datapath_warmup" not in methods and dp:
        notes.append(
            "the data path's pipeline figure includes the service process's one-off first-lease "
            "costs (no warm-up rollout)"
        )
    if "token_arrays" not in methods and dp:
        notes.append(
            "the token-array figure was not taken from the API's responses: the same kind of "
            "arrays were encoded client-side with the API's schema and write options"
        )
    if ov and "calibration" not in ov:
        notes.append(
            f"the overlap batch was not calibrated: generation alone took "
            f"{fig_text(ov['gen_only_s'])} s against {fig_text(ov['sandbox_only_s'])} s for "
            "sandboxes alone, so its ratio could only have caught full serialisation; and the "
            "generation-alone run scored every sample 1.0 without checking what was typed"
        )
    if notes:
        add(para(
            "The committed run predates parts of the current method (a fresh full run drops",
            "this paragraph):", "; ".join(notes) + ".",
        ))  # fmt: skip

    tpm = sb.get("trials_per_min", {})
    if tpm:
        c1, best = next(iter(tpm["ours"])), str(sb["best_concurrency"])
        ours1, cold1 = tpm["ours"][c1]["median"], tpm["cold"][c1]["median"]
        oursb, coldb, floorb = (tpm[s][best]["median"] for s in ("ours", "cold", "floor"))
        create_p50 = sb["ours_stage_seconds"][f"c{c1}.create"]["p50"]
        worst = str(sb.get("worst_vs_cold_concurrency", best))
        cpu = r.get("cpu_s_per_trial", {})
        cpu_text = (
            f"Per trial at concurrency {best} ours cost {cpu['ours']:.2f} CPU-seconds, the cold "
            f"harness {cpu['cold']:.2f} and the floor {cpu['floor']:.2f}."
            if {"ours", "cold", "floor"} <= set(cpu)
            else ""
        )
        harbor = tpm.get("harbor", {})
        harbor_text = ""
        if harbor:
            at = max(harbor, key=lambda c: harbor[c]["median"])
            mine = tpm["ours"].get(at, {}).get("median")
            harbor_text = (
                f"Harbor 0.25 peaked at {harbor[at]['median']:.1f} trials/min (concurrency {at})"
                + (f", where ours ran {mine / harbor[at]['median']:.1f}× as many." if mine else ".")
            )
        elif sb.get("harbor", {}).get("unavailable"):
            harbor_text = f"Harbor did not run: {sb['harbor']['unavailable']}."
        add(para(
            f"Sandboxes: at concurrency {c1} ours ran {ours1:.1f} trials/min against the cold",
            f"harness's {cold1:.1f} ({ours1 / cold1:.2f}×; the warm pool takes creation off the",
            f"critical path: create p50 {create_p50:.2f} s). At ours' best concurrency",
            f"({best}) ours ran {oursb:.1f}, the cold harness {coldb:.1f} and the floor",
            f"{floorb:.1f} trials/min; ours / cold was lowest at concurrency {worst}",
            f"({text_of(r, 'sandbox_vs_cold_min')}).", cpu_text, harbor_text,
        ))  # fmt: skip
    cmd = d.get("command")
    if cmd:
        ms = cmd["ms"]
        add(para(
            f"One agent command: the terminal answered in {ms['command']['p50']:.0f} ms at the",
            f"median ({ms['command']['p95']:.0f} ms p95), a bare exec of the same `echo` in",
            f"{ms['exec']['p50']:.0f} ms ({ms['exec']['p95']:.0f} ms), the `docker exec` CLI in",
            f"{ms['cli_exec']['p50']:.0f} ms: the terminal's own cost is",
            f"{ms['command']['p50'] - ms['exec']['p50']:.0f} ms a turn.",
        ))  # fmt: skip
    if ov:
        cal = ov.get("calibration")
        add(para(
            f"Overlap: end to end {fig_text(ov['end_to_end_s'])} s against generation alone",
            f"{fig_text(ov['gen_only_s'])} s and sandboxes alone",
            f"{fig_text(ov['sandbox_only_s'])} s, decoding at {ov['tokens_per_s']:.0f}",
            f"tokens/s: a ratio of {text_of(r, 'overlap')}, with the halves' balance",
            f"(generation / sandboxes) {text_of(r, 'overlap_balance')}.",
            "" if "chunk" not in ov else (
                f"The policy occupancy was {text_of(r, 'occupancy')} against"
                f" {text_of(r, 'occupancy_chunk')} under the chunk dispatch (slot / chunk"
                f" {text_of(r, 'occupancy_vs_chunk')} per repeat), whose ratio was"
                f" {text_of(r, 'overlap_chunk')}; end to end the chunk dispatch took"
                f" {text_of(r, 'end_to_end_chunk_vs_slot')}× as long."
            ),
            "" if not cal else (
                f"Calibration: sandboxes alone {cal['sandbox_only_s']:.1f} s; generation alone "
                + ", ".join(f"{x['gen_only_s']:.1f} s at {x['tokens_per_s']:.0f} tokens/s"
                            for x in cal["steps"])
                + f", and {cal['instant_gen_only_s']:.1f} s with instant generation."
            ),
        ))  # fmt: skip

    # ------------------------------------------------------------ optimisations
    add("## What was optimised")
    add(para(
        "What each change does, with the figures of the committed run that show where it",
        "stands; the before/after measurements of the changes themselves cannot be reproduced",
        "from this repository and are not quoted.",
    ))  # fmt: skip
    pages = dp.get("sqlite_blob_commits_per_s")
    page_text = (
        "Blob commits/s: "
        + ", ".join(f"{int(p) // 1024} KiB pages {fig_text(v, '{:.0f}')}" for p, v in pages.items())
        + "."
        if pages
        else f"The page-size comparison (`benchmarks/sqlite_pages.py`) is {NOT_RUN}."
    )
    tok = dp.get("token_arrays_bytes_64", {})
    if isinstance(tok.get("arrow_lz4"), dict):
        j = tok["json"]["median"]
        lz4 = (
            f"With lz4 it would be {j / tok['arrow_lz4']['median']:.2f}, uncompressed "
            f"{j / tok['arrow_uncompressed']['median']:.2f}."
        )
    else:
        lz4 = f"The comparison with lz4 and uncompressed Arrow is {NOT_RUN}."
    calls = sb.get("ours_engine_calls_per_trial", {})
    call_text = (
        f"Measured: {calls.get('create', 0):.2f} creates, {calls.get('exec', 0):.2f} execs and "
        f"{calls.get('attach', 0):.2f} attaches per trial (pool refills included), where "
        "there were 2 creates and 5 execs before this work, and 2 creates, 2 execs and one "
        "attach before the control channel below."
        if calls
        else f"The engine calls per trial are {NOT_RUN}."
    )
    cmd_ms = (d.get("command") or {}).get("ms")
    cmd_text = (
        f"Measured: {cmd_ms['command']['p50']:.0f} ms p50 against a bare exec's "
        f"{cmd_ms['exec']['p50']:.0f} ms; the poll used to add at least 100 ms (two idle "
        "checks 50 ms apart) and a dozen processes."
        if cmd_ms
        else f"The round-trip figures are {NOT_RUN}."
    )
    control_text = (
        f"Measured: a terminal turn's round trip is {cmd_ms['command']['p50']:.0f} ms p50, "
        f"{cmd_ms['exec']['p50'] - cmd_ms['command']['p50']:.0f} ms less than a bare exec of "
        "the same `echo` alone (the previous committed run, with one exec per turn: 79 ms "
        "against 60)."
        if cmd_ms
        else f"The round-trip figures are {NOT_RUN}."
    )
    cpu_c = sb.get("cpu_s_per_trial", {})
    best_c = str(sb.get("best_concurrency", ""))
    net_text = (
        f"Measured: the engine's CPU per trial at concurrency {best_c} is "
        f"{cpu_c['ours'][best_c]['engine']['median']:.2f} s for ours against "
        f"{cpu_c['cold'][best_c]['engine']['median']:.2f} s for the cold harness, whose "
        "`docker run --network none` gets a libnetwork sandbox per container."
        if {"ours", "cold"} <= set(cpu_c) and best_c in cpu_c["ours"]
        else f"The engine's CPU per trial is {NOT_RUN}."
    )
    busy_ov = (ov or {}).get("end_to_end_busy_s") or {}
    drain_text = (
        f"Measured: the overlap batch's drain (sandbox work after its last request) is "
        f"{busy_ov['drain_s']['median']:.1f} s."
        if "drain_s" in busy_ov
        else f"The overlap batch's drain is {NOT_RUN}."
    )
    both_text = (
        f"Measured: in the overlap batch's end-to-end runs sandbox work ran beside a request "
        f"for {busy_ov['both_s']['median']:.1f} of {busy_ov['sandbox_s']['median']:.1f} s."
        if "both_s" in busy_ov
        else f"The overlap timeline is {NOT_RUN}."
    )
    dispatch_text = (
        f"Measured on the long-tail overlap batch: policy occupancy {text_of(r, 'occupancy')}"
        f" against {text_of(r, 'occupancy_chunk')} by the chunk, a ratio of"
        f" {text_of(r, 'overlap')} against {text_of(r, 'overlap_chunk')}, and end to end the chunk"
        f" dispatch took {text_of(r, 'end_to_end_chunk_vs_slot')}× as long."
        if "occupancy_chunk" in r["figures"]
        else f"The side-by-side comparison with the chunk dispatch is {NOT_RUN}."
    )
    add("\n".join([
        item("**The verifier talks through its PID 1** (`sandboxes/verifier.py`). The",
             "verifier script is the container's main process, started by the warm pool and",
             "waiting on stdin; the service attaches, sends the upload and reads the tests'",
             "output and the evidence from the same stream, and the container is done when",
             "the script exits. That replaces two execs (tests, then the evidence read) and",
             "their create/inspect calls with one attach, which starts no process in the",
             "container; the engine also keeps no log of it (log driver `none`). The oracle's",
             "upload rides on the request that runs `solve.sh`.", call_text),
        item("**The agent container's commands go to its PID 1** (`sandboxes/control.py`).",
             "PID 1 of an agent container is a bash loop that reads requests from its stdin,",
             "which the service holds open over one attach session per sandbox; each terminal",
             "turn, exec and workspace tar runs as its child, in a process group of its own",
             "(killed at its limit), and answers on PID 1's stdout in base64 between",
             "nonce-tagged lines. No `docker exec` is left on a trial's path: no runc process,",
             "no exec create/start/inspect calls, a few forks in the container instead.",
             control_text),
        item("**The terminal sees the prompt come back** (`sandboxes/terminal.py`). The",
             "shell's `PROMPT_COMMAND` writes a counter before every prompt; the one request of",
             "a turn types the keys through the pane's pipe (no tmux client) and reads the",
             "counter with a shell builtin every few milliseconds (no process per poll), then",
             "waits for the log to stop growing.", cmd_text),
        item("**No network set up where there is none** (`sandboxes/isolation.py`). A",
             "sandbox whose task has `network_mode = \"none\"` is created with networking",
             "disabled: it still gets a network namespace of its own (loopback only), but the",
             "engine builds no libnetwork sandbox for it, whose prestart hook re-executes",
             "dockerd at every container start.", net_text),
        item("**Refills yield to verifications** (`sandboxes/pool.py`). Refilling the warm",
             "pool (create and start) waits while a verification runs, for at most",
             "`refill_defer_s`, so the end of a batch, when every sample verifies and the",
             "trainer waits for the last one, does not also pay for the next batch's",
             "containers.", drain_text),
        item("**A sample's slot covers its episode** (`service/scheduler.py`). When the agent",
             "loop ends the sample moves to one of as many verifying slots, and the next",
             "sample starts generating while it verifies: the policy server does not wait for",
             "tests.", both_text),
        item("**Dispatch by the slot** (`service/scheduler.py`). A slot that frees starts a",
             "sample at once, instead of waiting with the rest of a chunk for the slowest",
             "episode of the chunk before it; a group's samples not yet started share one",
             "first request and take slots as they free, before any other group starts.",
             dispatch_text),
        item("**Stored payload codec** (`service/payload_codec.py`, codec `cols1`). The four",
             "token arrays are stored as raw little-endian arrays (int32 ids, int8 mask,",
             "float64 logprobs, so any Python float round-trips exactly) after a small JSON",
             "header, instead of zlib-compressed JSON of the whole record. An Arrow lease",
             "builds its list columns straight from the stored bytes; a JSON lease splices",
             "`orjson` dumps of the flat lists after the header. Service CPU per trajectory,",
             f"commit to ack: {text_of(r, 'service_cpu_ms_per_traj')} ms."),
        item("**SQLite page size 64 KiB** (`service/store/schema.py`, new databases only). A",
             f"payload (~{BLOB_BYTES // 1000} KB for these trajectories) is a chain of",
             "overflow pages; bigger pages make it shorter.", page_text),
        item("**glibc heap retention** (`service/heap.py`, at service start-up):",
             "`M_MMAP_THRESHOLD` is pinned at 64 KiB, so freed payload buffers (larger than",
             "that) go back to the OS instead of staying in arenas that never shrink. RSS with",
             "the fill",
             f"stored: {text_of(r, 'rss_mib_10k', '{:.0f}')} MiB."),
        item("**Backpressure from the store to the scheduler** (`service/scheduler.py`): a",
             "sample's verifying slot is held until its commit returns, so a runner faster",
             "than the store cannot pile up encoded payloads. RSS peak during the fill:",
             f"{text_of(r, 'rss_mib_filling', '{:.0f}')} MiB."),
        item("**zstd Arrow IPC** (`service/api/batches.py`, `ARROW_IPC_OPTIONS`): token",
             f"arrays JSON / Arrow {text_of(r, 'arrow_vs_json_size')}, whole lease bodies",
             f"{text_of(r, 'arrow_vs_json_body_size')}.", lz4),
    ]))  # fmt: skip
    return blocks
