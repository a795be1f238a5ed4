"""The solution's list, dict and set subclasses' objects are sent again when the solution's own
code changes them (based.py `resend_changed`): only with the answer to a call the tests made, so
no check of the tests reads one at two moments. Each case is a wrong solution whose item's honest
`__eq__` changes its object while the tests' check runs (red team, stop 63: every one scored 1,
unflagged, where the changes were sent with any answer, a comparison's too; most pass under plain
pytest in one process), and the correct solution passes the same tests. Run through the real
runtime (`Layout`), without Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_verifier_runtime import Layout


def _run(root: Path, solution: str, tests: str) -> str:
    layout = Layout(root)
    layout.files("workspace", {"solution.py": solution})
    layout.files("tests", {"test_it.py": tests})
    layout.view()
    return layout.pytest().output


LIST_EQ = """_made = []
class One(int):
    def __eq__(self, other):
        for r in _made:
            list.__init__(r, [9, 2, 3])
        return int.__eq__(self, other)
    __hash__ = int.__hash__

class Readings(list):
    pass

def readings():
    r = Readings([One(1), 0, 0])
    _made.append(r)
    return r
"""
LIST_EQ_TESTS = """import solution

def test_eq_method():
    assert [1, 2, 3].__eq__(solution.readings())

def test_list_eq():
    assert list.__eq__([1, 2, 3], solution.readings())

def test_operator():
    import operator
    assert operator.eq([1, 2, 3], solution.readings())

def test_plain():
    assert [1, 2, 3] == solution.readings()
"""

SUBCLASS = """_made = []
class One(int):
    def __eq__(self, other):
        for r in _made:
            list.__init__(r, [9, 2, 3])
        return int.__eq__(self, other)
    __hash__ = int.__hash__

class Readings(list):
    pass

def readings():
    r = Readings([One(1), 0, 0])
    _made.append(r)
    return r
"""
SUBCLASS_TESTS = """import solution

class Mine(solution.Readings):
    pass

def test_sub():
    assert Mine([1, 2, 3]) == solution.readings()

def test_sub2():
    assert solution.readings() == Mine([1, 2, 3])
"""

KEY_AT_A_TIME = """_made = []
EXP = {"a": 0.5, "b": 0.25, "c": 0.25}
ORDER = ["a", "b", "c"]

class F(float):
    def __eq__(self, other):
        k = getattr(self, "key", None)
        if k is not None and _made:
            nxt = ORDER.index(k) + 1
            if nxt < 3:
                d = _made[0]
                for kk in ORDER:
                    dict.__setitem__(d, kk, _val(kk, ORDER[nxt]))
        return float.__eq__(self, other)
    __hash__ = float.__hash__

def _val(kk, good):
    f = F(EXP[kk] if kk == good else 0.0)
    f.key = kk
    return f

class Freq(dict):
    pass

def frequencies(text):
    d = Freq()
    for kk in ORDER:
        dict.__setitem__(d, kk, _val(kk, "a"))
    _made[:] = [d]
    return d
"""
KEY_AT_A_TIME_TESTS = """import pytest
import solution

def test_approx():
    assert solution.frequencies("a a b c") == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})

def test_loop():
    d = solution.frequencies("a a b c")
    for k, v in {"a": 0.5, "b": 0.25, "c": 0.25}.items():
        assert d[k] == v

def test_loop_approx():
    d = solution.frequencies("a a b c")
    for k, v in {"a": 0.5, "b": 0.25, "c": 0.25}.items():
        assert d[k] == pytest.approx(v)
"""

SET_EQUAL = """_made = []
_calls = {}
class One(int):
    def __eq__(self, other):
        v = int(self)
        _calls[v] = _calls.get(v, 0) + 1
        for s in _made:
            if v == 3 and _calls[v] == 4:
                set.clear(s); set.update(s, [3, One(5)])
            if v == 5 and _calls[v] == 1:
                set.clear(s); set.update(s, [5, 8])
        return int.__eq__(self, other)
    __hash__ = int.__hash__

class Primes(set):
    pass

def primes_below(n):
    s = Primes([2, One(3)])
    _made[:] = [s]
    _calls.clear()
    return s
"""
SET_EQUAL_TESTS = """import unittest
import solution

class T(unittest.TestCase):
    def test_set_equal(self):
        self.assertSetEqual(solution.primes_below(6), {2, 3, 5})
"""

SET_AND_DICT = """_made = {}
_once = set()

class One(int):
    def __eq__(self, other):
        tag = getattr(self, "tag", None)
        if tag and tag not in _once:
            _once.add(tag)
            ACTIONS[tag]()
        return int.__eq__(self, other)
    __hash__ = int.__hash__

def one(v, tag=None):
    o = One(v); o.tag = tag; return o

class Primes(set):
    pass

class Counts(dict):
    pass

def _sup():
    s = _made["sup"]; set.clear(s); set.update(s, [1, 2, 3])
def _seteq():
    s = _made["seteq"]; set.clear(s); set.update(s, [3, 5, 99, 100])
def _dicteq():
    d = _made["dicteq"]; dict.clear(d); d.update({"a": 1, "b": 2, "c": 1, "zz": 0})
def _two():
    b = _made["two_b"]; set.clear(b); set.update(b, [2, 3, 5, 6])

ACTIONS = {"sup": _sup, "seteq": _seteq, "dicteq": _dicteq, "two": _two}

def superset_case():
    s = Primes([2, one(3, "sup"), 4]); _made["sup"] = s; _once.discard("sup"); return s

def seteq_case():
    s = Primes([2, one(3, "seteq"), 4]); _made["seteq"] = s; _once.discard("seteq"); return s

def dicteq_case():
    d = Counts(a=one(1, "dicteq"), b=0, c=0); _made["dicteq"] = d; _once.discard("dicteq"); return d

def two_case():
    a = Primes([2, one(3, "two"), 5]); b = Primes([2, 3, 7])
    _made["two_b"] = b; _once.discard("two")
    return a, b
"""
SET_AND_DICT_TESTS = """import solution

def test_superset():
    assert {2, 3, 5, 7}.issuperset(solution.superset_case())

def test_set_eq_method():
    assert {2, 3, 5}.__eq__(solution.seteq_case())

def test_dict_eq_method():
    assert {"a": 1, "b": 2, "c": 1}.__eq__(solution.dicteq_case())

def test_two_mirrors():
    a, b = solution.two_case()
    assert a == b
"""

CORRECT = """class Readings(list): pass
class Primes(set): pass
class Counts(dict): pass
class Freq(dict): pass
def readings(): return Readings([1, 2, 3])
def primes_below(n): return Primes([2, 3, 5])
def word_counts(t): return Counts({1: 10, 2: 20, 3: 30})
def frequencies(t): return Freq(a=0.5, b=0.25, c=0.25)
def superset_case(): return Primes([2, 3, 5])
def seteq_case(): return Primes([2, 3, 5])
def dicteq_case(): return Counts(a=1, b=2, c=1)
def two_case(): return Primes([2, 3, 5]), Primes([2, 3, 5])
"""
CORRECT_TESTS = """import unittest, pytest
import solution

def test_list_eq_method():
    assert [1, 2, 3].__eq__(solution.readings())

class T(unittest.TestCase):
    def test_set_equal(self):
        self.assertSetEqual(solution.primes_below(6), {2, 3, 5})

def test_dict_copy():
    assert dict(solution.word_counts("x")) == {1: 10, 2: 20, 3: 30}

def test_approx():
    assert solution.frequencies("a a b c") == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})

def test_loop():
    d = solution.frequencies("a a b c")
    for k, v in {"a": 0.5, "b": 0.25, "c": 0.25}.items():
        assert d[k] == v

def test_superset():
    assert {2, 3, 5, 7}.issuperset(solution.superset_case())

def test_set_eq_method():
    assert {2, 3, 5}.__eq__(solution.seteq_case())

def test_dict_eq_method():
    assert {"a": 1, "b": 2, "c": 1}.__eq__(solution.dicteq_case())

def test_two_mirrors():
    a, b = solution.two_case()
    assert a == b
"""
SUBCLASS_CORRECT = """class Readings(list):
    pass

def readings():
    return Readings([1, 2, 3])
"""

# (red team, round 3) The tests' own item `__eq__` calls the solution while C code reads the
# object (`frozenset(expected) == got`, `expected.issubset(got)`, `OrderedDict(...) == got`): a
# call's answer is taken up at once only where a test's own statement made the call.
CALLED_UNDER_A_SET_CHECK = """_made = []
_done = []
class Primes(set):
    pass
Y = 3 + (2**61 - 1)   # hash(Y) == hash(3), Y != 3
def canonical(n):
    if n == 3 and _made and not _done:
        _done.append(1)
        s = _made[0]; s.clear(); s.add(3)     # now {3}: never {2, 3}
    return n
def primes_below(n):
    _done.clear()
    s = Primes([2, Y]); _made[:] = [s]; return s
"""
CALLED_UNDER_A_SET_CHECK_CORRECT = """class Primes(set):
    pass
def canonical(n):
    return n
def primes_below(n):
    return Primes(p for p in range(2, n) if all(p % d for d in range(2, p)))
"""
CALLED_UNDER_A_SET_CHECK_TESTS = """import unittest
import solution

class Num:
    # an expected number, as the solution's own canonical() writes it
    def __init__(self, n): self.n = n
    def __hash__(self): return hash(self.n)
    def __eq__(self, other): return other == solution.canonical(self.n)
    def __repr__(self): return "Num(%r)" % self.n

def test_frozenset():
    assert frozenset([Num(2), Num(3)]) == solution.primes_below(4)

class T(unittest.TestCase):
    def test_set_equal(self):
        self.assertSetEqual({Num(2), Num(3)}, solution.primes_below(4))
    def test_assert_equal(self):
        self.assertEqual(frozenset([Num(2), Num(3)]), solution.primes_below(4))
    def test_issubset(self):
        got = solution.primes_below(4)
        self.assertEqual(len(got), 2)
        self.assertTrue({Num(2), Num(3)}.issubset(got))
"""

CALLED_UNDER_A_DICT_OR_LIST_CHECK = """_made = {}
_done = set()
def _once(tag, fn):
    if tag in _made and tag not in _done:
        _done.add(tag); fn(_made[tag])
class Counts(dict):
    pass
class Readings(list):
    pass
class Primes(set):
    pass
def canonical(n):
    if n == 1:
        _once("d", lambda d: (d.clear(), d.update({"a": 0, "b": 2})))
        _once("l", lambda r: r.__setitem__(slice(None), [9, 2, 3]))
    if n == 3:
        _once("s", lambda s: (s.clear(), s.add(3)))
    return n
def counts():
    _done.discard("d"); d = Counts(a=1, b=0); _made["d"] = d; return d
def readings():
    _done.discard("l"); r = Readings([1, 0, 0]); _made["l"] = r; return r
Y = 3 + (2**61 - 1)
def primes_below(n):
    _done.discard("s"); s = Primes([2, Y]); _made["s"] = s; return s
"""
CALLED_UNDER_A_DICT_OR_LIST_CHECK_CORRECT = """class Counts(dict):
    pass
class Readings(list):
    pass
class Primes(set):
    pass
def canonical(n):
    return n
def counts():
    return Counts(a=1, b=2)
def readings():
    return Readings([1, 2, 3])
def primes_below(n):
    return Primes(p for p in range(2, n) if all(p % d for d in range(2, p)))
"""
CALLED_UNDER_A_DICT_OR_LIST_CHECK_TESTS = """import collections
import solution

class Num:
    def __init__(self, n): self.n = n
    def __hash__(self): return hash(self.n)
    def __eq__(self, other): return other == solution.canonical(self.n)
    def __repr__(self): return "Num(%r)" % self.n

def test_ordered():
    assert collections.OrderedDict(a=Num(1), b=Num(2)) == solution.counts()

def test_defaultdict():
    expected = collections.defaultdict(list)
    expected.update(a=Num(1), b=Num(2))
    assert expected == solution.counts()

def test_two_mirrors():
    assert solution.Readings([Num(1), Num(2), Num(3)]) == solution.readings()

class Row(list):
    pass

def test_tests_list_subclass():
    assert Row([Num(1), Num(2), Num(3)]) == solution.readings()

def test_isub():
    got = solution.primes_below(4)
    remaining = {Num(2), Num(3)}
    assert len(got) == len(remaining)
    remaining -= got   # set_difference_update reads got's table
    assert not remaining, remaining
"""

# (red team, round 4) A plain list or the solution's grid of its rows, compared in one `==`:
# each row is read when the loop reaches it; and a statement that reads a copy (its calls change
# the object), then the object: taken up between two statements only, and at once only where
# the statement's own instruction is the change.
ROWS_READ_IN_TURN = """class Row(list):
    pass
class Grid(list):
    pass
class Table(dict):
    pass
_made = []
def canonical(n):
    for r1, r2 in _made:
        if r1 == [1]:
            r1[:] = [55]; r2[:] = [2]
    return n
def grid():
    r1, r2 = Row([1]), Row([99]); _made.append((r1, r2)); return Grid([r1, r2])
def table():
    r1, r2 = Row([1]), Row([99]); _made.append((r1, r2)); return Table(a=r1, b=r2)
def plain_grid():
    r1, r2 = Row([1]), Row([99]); _made.append((r1, r2)); return [r1, r2]
"""
ROWS_READ_IN_TURN_CORRECT = """class Row(list):
    pass
class Grid(list):
    pass
class Table(dict):
    pass
def canonical(n):
    return n
def grid():
    return Grid([Row([1]), Row([2])])
def table():
    return Table(a=Row([1]), b=Row([2]))
def plain_grid():
    return [Row([1]), Row([2])]
"""
ROWS_READ_IN_TURN_TESTS = """import solution

class Num:
    def __init__(self, n): self.n = n
    def __hash__(self): return hash(self.n)
    def __eq__(self, other): return other == solution.canonical(self.n)
    def __repr__(self): return "Num(%r)" % self.n

def test_grid():
    assert solution.grid() == [[Num(1)], [2]]

def test_table():
    assert solution.table() == {"a": [Num(1)], "b": [2]}

def test_plain_list_of_rows():
    assert solution.plain_grid() == [[Num(1)], [2]]

def test_reflected():
    assert [[Num(1)], [2]] == solution.grid()
"""

A_COPY_THEN_THE_OBJECT = """class Tasks(list):
    pass
class Task:
    def __init__(self, p): self.p = p
    def priority(self):
        _fix()
        return self.p
    def __repr__(self): return "Task(%d)" % self.p
_made = []
def _fix():
    for t in _made:
        keep = sorted((x for x in t if x.p > 0), key=lambda x: x.p)
        list.clear(t); list.extend(t, keep)
def schedule(ps):
    t = Tasks(Task(p) for p in ps)   # WRONG: not sorted, keeps negatives
    _made.append(t); return t
def rank(task):
    _fix(); return task.p
def valid(task):
    for t in _made:
        keep = [x for x in t if x.p > 0]
        list.clear(t); list.extend(t, keep)
    return task.p > 0
"""
A_COPY_THEN_THE_OBJECT_CORRECT = """class Tasks(list):
    pass
class Task:
    def __init__(self, p): self.p = p
    def priority(self): return self.p
    def __repr__(self): return "Task(%d)" % self.p
def schedule(ps):
    return Tasks(sorted((Task(p) for p in ps if p > 0), key=lambda t: t.p))
def rank(task): return task.p
def valid(task): return task.p > 0
"""
A_COPY_THEN_THE_OBJECT_TESTS = """import solution

def test_sorted_by_key_function():
    got = solution.schedule([3, 1, 2])
    assert sorted(got, key=solution.rank) == got

def test_sorted_by_lambda_method():
    got = solution.schedule([3, 1, 2])
    assert sorted(got, key=lambda t: t.priority()) == got

def test_filter_keeps_all():
    got = solution.schedule([3, -1, 2])
    assert list(filter(solution.valid, got)) == got

def test_comprehension_keeps_all():
    got = solution.schedule([3, -1, 2])
    assert [t for t in got if solution.valid(t)] == got

def test_count():
    got = solution.schedule([3, -1, 2])
    assert sum(1 for t in got if solution.valid(t)) == len(got)
"""

# (red team, round 5) A query of the solution's that wrongly empties its object, called from a
# generator expression, a helper, a comprehension: the tests' next statement reads what it holds
# then (before, pytest's own `__main__` frame counted as the tests', and nothing was taken up);
# a routine whose `__name__` the solution set to a method's the tests call (`",".join`).
A_QUERY_THAT_EMPTIES = """class Bag(list):
    def contains(self, x):
        if x in self:
            list.remove(self, x)     # WRONG: a query that removes
            return True
        return False
def bag(xs):
    return Bag(xs)
"""
A_QUERY_THAT_EMPTIES_CORRECT = """class Bag(list):
    def contains(self, x):
        return x in self
def bag(xs):
    return Bag(xs)
"""
A_QUERY_THAT_EMPTIES_TESTS = """import solution

def has(b, x):
    return b.contains(x)

def test_genexp_then_len():
    b = solution.bag([1, 2, 3])
    assert all(b.contains(x) for x in [1, 2, 3])
    assert len(b) == 3
    assert b == [1, 2, 3]

def test_helper_then_eq():
    b = solution.bag([1, 2, 3])
    for x in [1, 2, 3]:
        assert has(b, x)
    assert b == [1, 2, 3]

def test_comprehension():
    b = solution.bag([4, 5])
    assert [b.contains(x) for x in (4, 5)] == [True, True]
    assert sorted(b) == [4, 5] and 4 in b and 5 in b
"""

A_NAME_OF_THE_SOLUTIONS_CHOOSING = """class Tasks(list):
    pass
_made = []
def _fix():
    for t in _made:
        keep = sorted(t)
        list.clear(t); list.extend(t, keep)
def schedule(ps):
    t = Tasks(ps)          # WRONG: not sorted
    _made.append(t); return t
def label(p):
    _fix()
    return "#%d" % p
label.__name__ = "join"
"""
A_NAME_OF_THE_SOLUTIONS_CHOOSING_CORRECT = """class Tasks(list):
    pass
def schedule(ps):
    return Tasks(sorted(ps))
def label(p):
    return "#%d" % p
"""
A_NAME_OF_THE_SOLUTIONS_CHOOSING_TESTS = """import unittest
import solution

class TestSchedule(unittest.TestCase):
    def test_sorted_unittest(self):
        got = solution.schedule([3, 1, 2])
        self.assertEqual(
            ",".join(map(solution.label, sorted(got))), ",".join(map(solution.label, got))
        )

def test_sorted_no_assert_rewrite():
    got = solution.schedule([3, 1, 2])
    same = ",".join(map(solution.label, sorted(got))) == ",".join(map(solution.label, got))
    assert same

def test_schedule_is_sorted():
    got = solution.schedule([3, 1, 2])
    assert ",".join(map(solution.label, sorted(got))) == ",".join(map(solution.label, got))
"""

# A correct solution changed from a helper, a comprehension, a decorated test: seen.
CHANGED_FROM_ANYWHERE = """class Stack(list):
    def push(self, x):
        list.append(self, x)
def stack():
    return Stack()
"""
CHANGED_FROM_ANYWHERE_TESTS = """from unittest import mock
import os
import solution

def push_all(s, xs):
    for x in xs:
        s.push(x)

def test_helper():
    s = solution.stack()
    push_all(s, [1, 2, 3])
    assert s == [1, 2, 3]

def test_comprehension():
    s = solution.stack()
    [s.push(x) for x in (1, 2)]
    assert len(s) == 2

@mock.patch.dict(os.environ, {"X": "1"})
def test_decorated():
    s = solution.stack()
    s.push(7)
    assert s == [7]

class TestStack:
    def test_method(self):
        s = solution.stack()
        s.push(1)
        assert s[-1] == 1
"""

# (red team, round 6) The same wrong query inside one `assert` (pytest keeps `b.contains` in a
# name of its own), split over two statements, two statements on one line, a `while`.
A_QUERY_IN_ONE_STATEMENT = """class Bag(list):
    def contains(self, x):
        if x in self:
            list.remove(self, x)     # WRONG: a query that removes
            return True
        return False
def bag(xs):
    return Bag(xs)
"""
A_QUERY_IN_ONE_STATEMENT_CORRECT = """class Bag(list):
    def contains(self, x):
        return x in self
def bag(xs):
    return Bag(xs)
"""
A_QUERY_IN_ONE_STATEMENT_TESTS = """import solution

def test_two_statements():          # should FAIL for SOL
    b = solution.bag([1, 2, 3])
    assert b.contains(2)
    assert len(b) == 3

def test_no_assert_rewrite():       # should FAIL for SOL
    b = solution.bag([1, 2, 3])
    ok = b.contains(2) and len(b) == 3
    assert ok

def test_assert_direct():
    b = solution.bag([1, 2, 3])
    assert b.contains(2) and len(b) == 3

def test_assert_eq_list():
    b = solution.bag([1, 2, 3])
    assert b.contains(2) and b == [1, 2, 3]

def test_assert_twice():            # fails anyway (real object asked twice)
    b = solution.bag([1, 2, 3])
    assert b.contains(2) and b.contains(2)
"""
TWO_STATEMENTS_ON_ONE_LINE_TESTS = """import solution

def has(b, x):
    return b.contains(x)

def test_semicolon():
    b = solution.bag([1, 2, 3])
    has(b, 2); assert len(b) == 3

def test_while_header():
    b = solution.bag([1, 2, 3])
    n = 0
    while has(b, 1) and len(b) == 3 and n < 3:
        n += 1
    assert n == 3
"""

CASES = {
    "an explicit list __eq__, operator.eq": (LIST_EQ, LIST_EQ_TESTS),
    "the tests' subclass of the solution's list": (SUBCLASS, SUBCLASS_TESTS),
    "approx, and a key at a time": (KEY_AT_A_TIME, KEY_AT_A_TIME_TESTS),
    "assertSetEqual": (SET_EQUAL, SET_EQUAL_TESTS),
    "issuperset, a set's and a dict's __eq__, two mirrors": (SET_AND_DICT, SET_AND_DICT_TESTS),
    "the tests' __eq__ calls it under a set's check": (
        CALLED_UNDER_A_SET_CHECK,
        CALLED_UNDER_A_SET_CHECK_TESTS,
    ),
    "the tests' __eq__ calls it under a dict's or list's check": (
        CALLED_UNDER_A_DICT_OR_LIST_CHECK,
        CALLED_UNDER_A_DICT_OR_LIST_CHECK_TESTS,
    ),
    "rows read in turn by one ==": (ROWS_READ_IN_TURN, ROWS_READ_IN_TURN_TESTS),
    "a copy, then the object, in one statement": (
        A_COPY_THEN_THE_OBJECT,
        A_COPY_THEN_THE_OBJECT_TESTS,
    ),
    "a query that empties it": (A_QUERY_THAT_EMPTIES, A_QUERY_THAT_EMPTIES_TESTS),
    "a name of the solution's choosing": (
        A_NAME_OF_THE_SOLUTIONS_CHOOSING,
        A_NAME_OF_THE_SOLUTIONS_CHOOSING_TESTS,
    ),
    "a query in one statement": (A_QUERY_IN_ONE_STATEMENT, A_QUERY_IN_ONE_STATEMENT_TESTS),
    "two statements on one line": (A_QUERY_IN_ONE_STATEMENT, TWO_STATEMENTS_ON_ONE_LINE_TESTS),
}


@pytest.mark.parametrize("case", CASES)
def test_a_wrong_solution_that_changes_its_object_under_the_check_fails(
    case: str, tmp_path: Path
) -> None:
    solution, tests = CASES[case]
    output = _run(tmp_path / "v", solution, tests)
    assert " failed" in output and " passed" not in output, output


def test_the_correct_solutions_pass(tmp_path: Path) -> None:
    output = _run(tmp_path / "a", CORRECT, CORRECT_TESTS)
    assert "9 passed" in output and "failed" not in output, output
    output = _run(tmp_path / "b", SUBCLASS_CORRECT, SUBCLASS_TESTS)
    assert "2 passed" in output and "failed" not in output, output
    output = _run(tmp_path / "c", CALLED_UNDER_A_SET_CHECK_CORRECT, CALLED_UNDER_A_SET_CHECK_TESTS)
    assert "4 passed" in output and "failed" not in output, output
    output = _run(
        tmp_path / "d",
        CALLED_UNDER_A_DICT_OR_LIST_CHECK_CORRECT,
        CALLED_UNDER_A_DICT_OR_LIST_CHECK_TESTS,
    )
    assert "5 passed" in output and "failed" not in output, output
    output = _run(tmp_path / "e", ROWS_READ_IN_TURN_CORRECT, ROWS_READ_IN_TURN_TESTS)
    assert "4 passed" in output and "failed" not in output, output
    output = _run(tmp_path / "f", A_COPY_THEN_THE_OBJECT_CORRECT, A_COPY_THEN_THE_OBJECT_TESTS)
    assert "5 passed" in output and "failed" not in output, output
    output = _run(tmp_path / "g", A_QUERY_THAT_EMPTIES_CORRECT, A_QUERY_THAT_EMPTIES_TESTS)
    assert "3 passed" in output and "failed" not in output, output
    output = _run(
        tmp_path / "h",
        A_NAME_OF_THE_SOLUTIONS_CHOOSING_CORRECT,
        A_NAME_OF_THE_SOLUTIONS_CHOOSING_TESTS,
    )
    assert "3 passed" in output and "failed" not in output, output
    output = _run(tmp_path / "i", CHANGED_FROM_ANYWHERE, CHANGED_FROM_ANYWHERE_TESTS)
    assert "4 passed" in output and "failed" not in output, output
    correct = A_QUERY_IN_ONE_STATEMENT_CORRECT
    output = _run(tmp_path / "j", correct, A_QUERY_IN_ONE_STATEMENT_TESTS)
    assert "5 passed" in output and "failed" not in output, output
    output = _run(tmp_path / "k", correct, TWO_STATEMENTS_ON_ONE_LINE_TESTS)
    assert "2 passed" in output and "failed" not in output, output
