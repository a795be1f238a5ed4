import pytest
from solution import fn


def test_basic():
    assert fn([12, 18, 24]) == 6
    assert fn([7, 13]) == 1


def test_negative_and_zero():
    assert fn([-4, 6]) == 2
    assert fn([0, 9, 12]) == 3
    assert fn([0, 0]) == 0


def test_single():
    assert fn([-7]) == 7


def test_empty_raises():
    with pytest.raises(ValueError):
        fn([])
