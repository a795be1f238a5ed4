import pytest
from solution import fn


def test_valid():
    assert fn("1h30m") == 5400
    assert fn("2d") == 172800
    assert fn("1d2h3m4s") == 93784
    assert fn("45s") == 45


def test_large_and_zero_parts():
    assert fn("90m") == 5400
    assert fn("0s") == 0


@pytest.mark.parametrize("bad", ["", "10", "1x", "m5", "1m1h", "1h1h", "1H", " 1h", "-1h", "1.5h"])
def test_invalid(bad):
    with pytest.raises(ValueError):
        fn(bad)
