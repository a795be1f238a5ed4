"""How an episode ends, end to end (`rollouts serve`, the stand-in recording what it served, real
Docker sandboxes and verifier, raw HTTP). Each is checked on the delivered trajectory and
against the stand-in's own record, token for token:

- running out of `agent.max_turns`: a graded episode of exactly that many turns;
- turns cut by `max_tokens` (finish_reason `length`): no EOS was generated, so the observation's
  template delta closes the turn (`<|im_end|>`, mask 0) before the next one;
- turns ended by a stop string: the text stops before it but the token ids include it; the
  agent sees the ids decoded, and the template closes the turn;
- `agent.timeout_s`: `agent_timeout`, graded; with `mask_agent_timeout` it is masked instead;
- the context filling up: `context_length`, graded, the sequence within `max_model_len`.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from sandboxes.tasks import load_tasks
from service.agent.prompt import SYSTEM_PROMPT, first_user_message
from service.export import export_parquet
from tests.e2e.live import (
    SMALL_GROUPS,
    TASKS,
    generated_spans,
    serve,
    stand_in,
    trajectories,
    turns_served,
)

pytestmark = pytest.mark.docker
IM_END = 2  # the stand-in's <|im_end|>, its EOS


def _body(sampling: dict | None = None, **agent: object) -> dict:
    return {
        "tasks": {"path": TASKS, "ids": ["camel-to-snake"]},
        "n_samples": 1,
        "sampling": {"seed": 4, **(sampling or {})},
        "agent": agent,
        "advantage": SMALL_GROUPS,
    }


def _closed_by_template(t: dict) -> None:
    """After every generated turn but the last comes a template delta that opens with
    <|im_end|> at mask 0: the turn had no EOS of its own."""
    spans = generated_spans(t)
    for _, end in spans[:-1]:
        assert t["response_token_ids"][end] == IM_END and t["loss_mask"][end] == 0
        assert t["response_token_ids"][end - 1] != IM_END


def test_turn_limit_cut_turns_stop_strings_and_timeouts(tmp_path: Path) -> None:
    # The stand-in's draw for this task is 0.09 with seed 4 (the oracle: 0.09 < p_correct) and
    # 0.76 with seed 3 (a wrong solution).
    with (
        stand_in(tmp_path, p_correct=0.5) as policy,
        serve(tmp_path, [policy.url], "--max-concurrent-samples", "8") as svc,
    ):
        ids = {
            "one_turn": svc.submit(_body(max_turns=1)),
            "cut": svc.submit(_body({"max_tokens": 12}, max_turns=3)),
            "stop": svc.submit(_body({"stop": ["keystrokes"]}, max_turns=2)),
        }
        for rid in ids.values():
            svc.wait_finished(rid)
        # The agent's clock starts after the first turn. Every later turn is held in the
        # stand-in (a prompt longer than the first) until the test releases it, so these
        # episodes cannot end before their 0.05 s run out, whatever the machine's speed; and
        # they type a wrong solution, so whether it was typed before the clock ran out does
        # not change the grade.
        httpx.post(
            policy.url + "/standin/hold",
            params={"after_tokens": 0, "longer_than": _first_prompt_tokens(policy.url)},
            timeout=30,
        ).raise_for_status()
        wrong = {"seed": 3}
        ids["timeout"] = svc.submit(_body(wrong, timeout_s=0.05))
        ids["timeout_masked"] = svc.submit(_body(wrong, timeout_s=0.05, mask_agent_timeout=True))
        for name in ("timeout", "timeout_masked"):
            svc.wait_finished(ids[name])
        httpx.post(policy.url + "/standin/release", timeout=30).raise_for_status()
        got = {}
        for name, rid in ids.items():
            if name != "timeout_masked":
                [got[name]] = trajectories(svc.drain(rid))
        # A group of nothing but masked samples is never offered: read the store instead
        # (`rollouts export` works while the service runs).
        masked_rid = ids["timeout_masked"]
        assert svc.lease(masked_rid).headers["X-Rollouts-Remaining"] == "0"
        assert svc.status(masked_rid)["counts"] == {"cancelled": 1}
        export_parquet(svc.data_dir, tmp_path / "masked.parquet", masked_rid)
        [got["timeout_masked"]] = pq.read_table(tmp_path / "masked.parquet").to_pylist()
        served = policy.served()
        decoded = {
            s: policy.detokenize(got["stop"]["response_token_ids"][s[0] : s[1]])
            for s in generated_spans(got["stop"])
        }
        start, end = generated_spans(got["timeout"])[0]
        typed_first = policy.detokenize(got["timeout"]["response_token_ids"][start:end])

    # max_turns 1: the reply typing the solution is the only turn; then the verifier grades it.
    t = got["one_turn"]
    assert (t["status"], t["reward"], t["num_turns"]) == ("ok", 1.0, 1)
    assert len(turns_served(t, served)) == 1
    assert t["messages"][-1]["role"] == "assistant"  # no observation after the last turn

    # max_tokens 12: every turn is cut (`length`), closed by the template, and graded.
    t = got["cut"]
    turns = turns_served(t, served)
    assert len(turns) == t["num_turns"] == 3
    assert all(x["finish_reason"] == "length" and len(x["token_ids"]) == 12 for x in turns)
    assert t["stop_reason"] == "length" and t["status"] == "ok" and t["reward"] == 0.0
    _closed_by_template(t)

    # A stop string: the ids include the token holding it; the agent saw the ids decoded.
    t = got["stop"]
    turns = turns_served(t, served)
    assert len(turns) == t["num_turns"] == 2
    assert all((x["finish_reason"], x["stop_reason"]) == ("stop", "keystrokes") for x in turns)
    replies = [m["content"] for m in t["messages"] if m["role"] == "assistant"]
    assert replies == list(decoded.values())
    assert all("keystrokes" in r and not r.endswith("}") for r in replies)
    _closed_by_template(t)
    assert t["status"] == "ok" and t["reward"] == 0.0  # nothing parsed, nothing typed

    # The agent timeout: graded as it stands (a wrong solution: 0)...
    assert "return None" in typed_first  # the stand-in's wrong body (standin/behaviour.py)
    t = got["timeout"]
    assert (t["status"], t["reward"], t["exclude_from_baseline"]) == ("agent_timeout", 0.0, False)
    # ...or, on request, masked: no reward, out of the baseline.
    t = got["timeout_masked"]
    assert (t["status"], t["reward"], t["exclude_from_baseline"]) == ("cancelled", None, True)


def _first_prompt_tokens(url: str) -> int:
    """The first prompt of this task, as the stand-in at `url` tokenizes it."""
    [task] = load_tasks(TASKS, ids=["camel-to-snake"])
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": first_user_message(task.instruction)},
    ]
    r = httpx.post(url + "/tokenize", json={"messages": messages}, timeout=30)
    return r.json()["count"]


def test_context_filling_up_is_graded_context_length(tmp_path: Path) -> None:
    # The first prompt plus room for ~1.5 replies.
    with stand_in(tmp_path, record=False) as probe:
        prompt_len = _first_prompt_tokens(probe.url)
    limit = prompt_len + 250
    with (
        stand_in(tmp_path, p_correct=1.0, extra=["--max-model-len", str(limit)]) as policy,
        serve(tmp_path, [policy.url]) as svc,
    ):
        rid = svc.submit(_body())
        svc.wait_finished(rid)
        [t] = trajectories(svc.drain(rid))
        served = policy.served()
    assert len(t["prompt_token_ids"]) == prompt_len
    assert t["status"] == "context_length" and t["stop_reason"] == "length", t["status"]
    assert t["reward"] is not None and t["exclude_from_baseline"] is False  # graded, not masked
    assert len(t["prompt_token_ids"]) + len(t["response_token_ids"]) <= limit
    assert len(turns_served(t, served)) == t["num_turns"] >= 1
