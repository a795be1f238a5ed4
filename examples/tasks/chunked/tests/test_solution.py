import itertools

import pytest
from solution import fn


def test_chunks():
    assert list(fn([1, 2, 3, 4, 5], 2)) == [[1, 2], [3, 4], [5]]
    assert list(fn("abcd", 2)) == [["a", "b"], ["c", "d"]]
    assert list(fn([1, 2], 5)) == [[1, 2]]


def test_empty():
    assert list(fn([], 3)) == []


def test_lazy_on_infinite_iterator():
    counter = itertools.count()
    chunks = fn(counter, 3)
    assert next(chunks) == [0, 1, 2]
    assert next(chunks) == [3, 4, 5]
    assert next(counter) == 6  # nothing beyond the requested chunks was consumed


def test_bad_size():
    with pytest.raises(ValueError):
        list(fn([1, 2, 3], 0))
