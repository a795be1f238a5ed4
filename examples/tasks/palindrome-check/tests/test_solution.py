from solution import fn


def test_sentences():
    assert fn("A man, a plan, a canal: Panama") is True
    assert fn("race a car") is False
    assert fn("No 'x' in Nixon") is True


def test_digits():
    assert fn("12321") is True
    assert fn("123") is False


def test_no_alphanumerics():
    assert fn("") is True
    assert fn("!!") is True
