"""`rollouts pull` and `rollouts export` as the commands a user runs, against a real
`rollouts serve` (the stand-in, real Docker sandboxes):

- `pull --url --out DIR` leases, writes one Parquet file per batch, acks, and stops once
  nothing is left; the service then offers nothing more of that rollout;
- `export --data-dir D --out F` (while the service runs) writes the committed trajectories,
  and they are the pulled ones, field for field; `--rollout` keeps one rollout;
- failures are one `error:` line: a wrong API key (pull, exit 1), no store (export, exit 2).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.trajectory import from_arrow
from tests.e2e.live import API_KEY, ROOT, SMALL_GROUPS, TASKS, serve, stand_in

pytestmark = pytest.mark.docker


def rollouts(*args: str, key: str = API_KEY) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLOUTS_API_KEY": key, "NO_COLOR": "1"}
    cmd = [sys.executable, "-m", "clients.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_pull_then_export_hand_over_the_same_trajectories(tmp_path: Path) -> None:
    with stand_in(tmp_path, p_correct=0.5) as policy, serve(tmp_path, [policy.url]) as svc:
        body = {"n_samples": 2, "sampling": {"seed": 2}, "agent": {"max_turns": 2},
                "advantage": SMALL_GROUPS}  # fmt: skip
        rid = svc.submit(
            {**body, "tasks": {"path": TASKS, "ids": ["camel-to-snake", "gcd-of-list"]}}
        )
        other = svc.submit({**body, "tasks": {"path": TASKS, "ids": ["palindrome-check"]}})
        svc.wait_finished(rid)
        svc.wait_finished(other)

        bad = rollouts("pull", "--url", svc.url, "--out", str(tmp_path / "x"), key="wrong")
        assert bad.returncode == 1 and bad.stderr.startswith("error: HTTP 401")
        assert len(bad.stderr.strip().splitlines()) == 1

        out = tmp_path / "pulled"
        pull = rollouts("pull", "--url", svc.url, "--out", str(out), "--rollout", rid,
                        "--max-groups", "1", "--wait", "5")  # fmt: skip
        assert pull.returncode == 0, pull.stderr
        assert pull.stdout.strip().splitlines()[-1] == "4 trajectories pulled"
        files = sorted(out.glob("batch-*.parquet"))
        assert len(files) == 2 and not list(out.glob(".*partial"))  # one file per batch
        # Pulled means acknowledged: nothing of that rollout is offered again; the other
        # rollout was left alone.
        r = svc.lease(rid)
        assert r.status_code == 204 and r.headers["X-Rollouts-Remaining"] == "0"
        assert svc.lease(other, lease_s=1).status_code == 200

        exported = tmp_path / "export.parquet"
        ex = rollouts("export", "--data-dir", str(svc.data_dir), "--out", str(exported),
                      "--rollout", rid)  # fmt: skip
        assert ex.returncode == 0, ex.stderr
        assert ex.stdout.strip() == f"4 trajectories -> {exported}"
        everything = tmp_path / "all.parquet"
        ex = rollouts("export", "--data-dir", str(svc.data_dir), "--out", str(everything))
        assert ex.returncode == 0 and ex.stdout.startswith("6 trajectories")

    pulled = from_arrow(pa.concat_tables([pq.read_table(f) for f in files]))
    stored = from_arrow(pq.read_table(exported))
    assert sorted(t.trajectory_id for t in pulled) == [
        f"{rid}.g{g}.s{s}" for g in range(2) for s in range(2)
    ]
    by_id = {t.trajectory_id: t for t in stored}
    assert by_id.keys() == {t.trajectory_id for t in pulled}
    for t in pulled:
        assert t == by_id[t.trajectory_id], t.trajectory_id  # every field, advantage included
    assert {t.rollout_id for t in from_arrow(pq.read_table(everything))} == {rid, other}

    missing = rollouts("export", "--data-dir", str(tmp_path / "nope"), "--out", str(exported))
    assert missing.returncode == 2 and missing.stderr.startswith("error: --data-dir")
    assert len(missing.stderr.strip().splitlines()) == 1
