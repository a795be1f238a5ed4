import copy

from solution import fn


def test_merge():
    base = {"a": 1, "b": {"x": 1, "y": 2}}
    override = {"b": {"y": 3, "z": 4}, "c": 5}
    assert fn(base, override) == {"a": 1, "b": {"x": 1, "y": 3, "z": 4}, "c": 5}


def test_override_wins_on_type_mismatch():
    assert fn({"a": {"x": 1}}, {"a": 2}) == {"a": 2}
    assert fn({"a": 2}, {"a": {"x": 1}}) == {"a": {"x": 1}}
    assert fn({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


def test_inputs_untouched_and_not_shared():
    base = {"n": {"deep": {"v": 1}}}
    override = {"m": {"w": 2}}
    before = (copy.deepcopy(base), copy.deepcopy(override))
    result = fn(base, override)
    result["n"]["deep"]["v"] = 99
    result["m"]["w"] = 99
    assert (base, override) == before


def test_empty():
    assert fn({}, {}) == {}
