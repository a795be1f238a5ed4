import pytest
from solution import fn


def test_runs():
    assert fn("aaabcc") == "3a1b2c"
    assert fn("abc") == "1a1b1c"
    assert fn("z" * 12) == "12z"


def test_case_and_punctuation():
    assert fn("aA") == "1a1A"
    assert fn("  !") == "2 1!"


def test_empty():
    assert fn("") == ""


def test_digits_rejected():
    with pytest.raises(ValueError):
        fn("a1")
