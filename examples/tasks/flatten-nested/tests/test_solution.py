from solution import fn


def test_nested():
    assert fn([1, [2, [3, (4, 5)]], 6]) == [1, 2, 3, 4, 5, 6]
    assert fn(["ab", ("cd", ["e"])]) == ["ab", "cd", "e"]


def test_empty_containers():
    assert fn([[], [[]], ()]) == []


def test_other_leaves():
    assert fn([{"a": 1}, None, b"x", {2}]) == [{"a": 1}, None, b"x", {2}]
    assert fn(5) == [5]


def test_deep():
    deep = [7]
    for _ in range(5000):
        deep = [deep]
    assert fn(deep) == [7]
