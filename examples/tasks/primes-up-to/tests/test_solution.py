from solution import fn


def test_small():
    assert fn(10) == [2, 3, 5, 7]
    assert fn(2) == [2]
    assert fn(13) == [2, 3, 5, 7, 11, 13]


def test_below_two():
    assert fn(1) == []
    assert fn(0) == []
    assert fn(-5) == []


def test_large():
    primes = fn(100000)
    assert len(primes) == 9592
    assert primes[-1] == 99991
