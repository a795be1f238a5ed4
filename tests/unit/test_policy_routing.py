"""PolicyRouter: least-loaded placement, stickiness, failure cool-down."""

from __future__ import annotations

import pytest

from service.policy.routing import NoServerInRotation, PolicyRouter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


A, B, C = "http://a:8000", "http://b:8000", "http://c:8000"


def test_new_samples_go_to_least_loaded() -> None:
    r = PolicyRouter([A, B, C])
    placed = [r.acquire(f"s{i}") for i in range(6)]
    assert sorted(placed) == sorted([A, B, C] * 2)
    r.release("s0")
    r.release("s3")  # s0 and s3 were both on A (round-robin by load)
    assert r.in_flight(A) == 0
    assert r.acquire("new") == A


def test_existing_sample_sticks_to_its_server() -> None:
    r = PolicyRouter([A, B])
    first = r.acquire("s")
    for i in range(5):
        r.acquire(f"other{i}")
    assert r.acquire("s") == first
    assert r.in_flight(A) + r.in_flight(B) == 6  # re-acquiring does not double count


def test_assign_pins_a_sample() -> None:
    r = PolicyRouter([A, B])
    r.assign("s", B)
    assert r.acquire("s") == B and r.in_flight(B) == 1
    r.assign("s", A)  # re-pinning moves the count
    assert (r.in_flight(A), r.in_flight(B)) == (1, 0)
    r.release("s")
    assert r.in_flight(A) == 0
    with pytest.raises(ValueError, match="unknown URL"):
        r.assign("t", C)


def test_failed_server_cools_down_and_comes_back() -> None:
    clock = Clock()
    r = PolicyRouter([A, B], cooldown_s=10, clock=clock)
    assert r.acquire("s") == A
    r.mark_failed(A)
    assert r.acquire("s") == B  # the sticky server is down: the sample moves
    assert r.in_flight(A) == 0 and r.in_flight(B) == 1
    assert r.acquire("t") == B  # A still cooling down
    clock.now += 10
    assert r.healthy(A)
    assert r.acquire("u") == A  # back in rotation, and least loaded


def test_all_down_uses_least_recently_failed() -> None:
    clock = Clock()
    r = PolicyRouter([A, B, C], cooldown_s=60, clock=clock)
    r.mark_failed(B)
    clock.now += 1
    r.mark_failed(A)
    clock.now += 1
    r.mark_failed(C)
    assert r.acquire("s") == B
    assert r.pick() == B


def test_mark_ok_clears_failure() -> None:
    r = PolicyRouter([A, B], cooldown_s=60)
    r.mark_failed(A)
    r.mark_ok(A)
    assert r.healthy(A)


def test_bad_configuration_is_named() -> None:
    # No URL: every request names its own servers (service/policy/named.py); none to pick.
    with pytest.raises(NoServerInRotation, match="no policy server"):
        PolicyRouter([]).pick()
    with pytest.raises(ValueError, match="duplicate"):
        PolicyRouter([A, A])
    with pytest.raises(ValueError, match="unknown URL"):
        PolicyRouter([A]).mark_failed(B)
