import itertools

import pytest
from solution import fn


def test_windows():
    assert list(fn([1, 2, 3, 4], 2)) == [(1, 2), (2, 3), (3, 4)]
    assert list(fn("abc", 3)) == [("a", "b", "c")]
    assert list(fn([5, 6], 1)) == [(5,), (6,)]


def test_too_short():
    assert list(fn([1, 2], 3)) == []
    assert list(fn([], 1)) == []


def test_infinite():
    assert list(itertools.islice(fn(itertools.count(), 3), 2)) == [(0, 1, 2), (1, 2, 3)]


def test_bad_size():
    with pytest.raises(ValueError):
        list(fn([1, 2, 3], 0))
