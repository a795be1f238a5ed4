from solution import fn


def test_groups():
    words = ["eat", "tea", "tan", "ate", "nat", "bat"]
    assert fn(words) == [["eat", "tea", "ate"], ["tan", "nat"], ["bat"]]


def test_case_sensitive():
    assert fn(["ab", "Ba", "ba"]) == [["ab", "ba"], ["Ba"]]


def test_duplicates_and_empty_string():
    assert fn(["a", "a", "", "b"]) == [["a", "a"], [""], ["b"]]


def test_empty():
    assert fn([]) == []
