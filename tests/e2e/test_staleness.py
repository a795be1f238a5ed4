"""Policy versions and max_staleness, end to end (`rollouts serve --stale-policy requeue`, the
stand-in, real Docker sandboxes, raw HTTP), as docs/delivery.md says:

- every generated token is tagged with the policy version of the weights that generated it (the
  stand-in's weight_versions spans): the trajectory records them per token and the oldest and
  newest as policy_version_start/end; each request carries `cache_salt: policy-v<version>-<run>` of
  the version its server served when it was sent (so no prefix cached under an older policy is
  reused);
- a complete group whose earliest turn is older than version - max_staleness is not offered;
  with `requeue` its trajectories are discarded and the group runs again under new ids
  (suffix `.a1`), tagged with the new version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.live import SMALL_GROUPS, TASKS, serve, stand_in, turns_served, wait_until

pytestmark = pytest.mark.docker


def _body(task: str, **agent: int) -> dict:
    return {
        "tasks": {"path": TASKS, "ids": [task]},
        "n_samples": 2,
        "sampling": {"seed": 3},
        "agent": agent,
        "advantage": SMALL_GROUPS,
    }


def test_turns_are_tagged_and_stale_groups_rerun_under_new_ids(tmp_path: Path) -> None:
    with (
        stand_in(tmp_path, p_correct=1.0) as policy,
        serve(tmp_path, [policy.url], "--stale-policy", "requeue") as svc,
    ):
        # 1. The version changes while a group runs: its first turn was asked for under version
        #    0 (held in the paused stand-in), but the stand-in was tagged 1 before it generated
        #    a token of it: every token is version 1. Later turns are asked for under 1.
        policy.pause()
        tagged = svc.submit(_body("camel-to-snake"))
        wait_until("the first turn", lambda: policy.metric("vllm:num_requests_waiting") >= 1, 60)
        assert svc.set_policy(1)["version"] == 1
        policy.resume()
        svc.wait_finished(tagged)
        r = svc.lease(tagged)
        assert r.status_code == 200, r.text
        [group] = r.json()["groups"]
        assert svc.ack(r.json()["batch_id"]).status_code == 200
        served = policy.served()
        for t in group["trajectories"]:
            assert t["status"] == "ok" and t["reward"] == 1.0, t["status"]
            assert (t["policy_version_start"], t["policy_version_end"]) == (1, 1)
            versions = zip(t["response_policy_versions"], t["loss_mask"], strict=True)
            generated = [v for v, m in versions if m]
            assert generated and set(generated) == {1}
            salts = [turn["cache_salt"].rsplit("-", 1)[0] for turn in turns_served(t, served)]
            assert len(salts) >= 2 and salts == ["policy-v0"] + ["policy-v1"] * (len(salts) - 1)

        # 2. A group generated under version 1 becomes too stale at version 3, max_staleness 1.
        stale = svc.submit(_body("gcd-of-list", max_turns=1))
        svc.wait_finished(stale)
        first_ids = sorted(f"{stale}.g0.s{k}" for k in range(2))
        assert svc.set_policy(3, max_staleness=1)["max_staleness"] == 1
        r = svc.lease(stale)  # not offered: discarded and queued to run again
        assert r.status_code == 204 and r.headers["X-Rollouts-Remaining"] == "1"
        r = svc.lease(stale, wait_s=240)
        assert r.status_code == 200, r.text
        [rerun] = r.json()["groups"]
        assert svc.ack(r.json()["batch_id"]).status_code == 200
        ids = sorted(t["trajectory_id"] for t in rerun["trajectories"])
        assert ids == [f"{i}.a1" for i in first_ids]
        # The re-run asked for its turn under version 3. (Same group, same seed: its tokens may
        # equal the discarded attempt's, so look among the version-3 requests only.)
        [v3_request] = [r for r in policy.requests() if r[0]["cache_salt"].startswith("policy-v3-")]
        assert len(v3_request) == 2  # the group's shared first turn: one request, n = 2
        for t in rerun["trajectories"]:
            assert (t["policy_version_start"], t["policy_version_end"]) == (3, 3)
            assert t["status"] == "ok" and t["reward"] == 1.0
            assert len(turns_served(t, v3_request)) == 1  # its one turn, served under v3
        # The discarded attempt is never delivered, and nothing is left to deliver.
        r = svc.lease(None)
        assert r.status_code == 204 and r.headers["X-Rollouts-Remaining"] == "0"
        assert svc.status(stale)["samples_completed"] == 2
