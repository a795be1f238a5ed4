import pytest
from solution import fn


def test_values():
    assert fn(1) == "I"
    assert fn(4) == "IV"
    assert fn(9) == "IX"
    assert fn(14) == "XIV"
    assert fn(1994) == "MCMXCIV"
    assert fn(3999) == "MMMCMXCIX"


@pytest.mark.parametrize("bad", [0, -1, 4000])
def test_out_of_range(bad):
    with pytest.raises(ValueError):
        fn(bad)


@pytest.mark.parametrize("bad", ["12", 3.0, True])
def test_wrong_type(bad):
    with pytest.raises(TypeError):
        fn(bad)
