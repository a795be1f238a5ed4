"""What the tested process can do to the tests through the process boundary (issue 34): which of
the tests' objects it may act on, which names it may have resolved in the tests' process, what
of the runner's state reaches it, and how its answers to comparisons are taken.

Each class is run twice, without Docker (tests/unit/test_verifier_runtime.py's Layout: real
pytest or a plain script in one process, the workspace's code in the tested process): with the
attack from standin/attacks.py (BOUNDARY_ATTACKS), which scored 1 on the landed runtime, and
with an honest solution that does the same kind of thing rightly, which must pass unflagged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from standin.attacks import BOUNDARY_ATTACKS
from tests.unit.test_verifier_runtime import Layout, Run


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path / "verifier")


def _pytest_run(layout: Layout, solution: str, tests: str) -> Run:
    layout.files("workspace", {"solution.py": solution})
    layout.files("tests", {"test_it.py": tests})
    layout.view()
    return layout.pytest()


# ---- (1) comparisons: one request, bools only ---------------------------------------------

_CAMEL = [
    ("getValue", "get_value"), ("PascalCaseName", "pascal_case_name"), ("ABC", "abc"),
    ("HTTPServer", "http_server"), ("version2Update", "version2_update"), ("fooBar", "foo_bar"),
    ("Ab", "ab"), ("aB", "a_b"), ("userID", "user_id"), ("XMLHttpRequest", "xml_http_request"),
    ("aBC", "a_bc"), ("getHTTPCode", "get_http_code"),
]  # fmt: skip
CAMEL_TESTS = f"""
import pytest

from solution import fn


@pytest.mark.parametrize(("name", "expected"), {_CAMEL!r})
def test_fn(name, expected):
    assert fn(name) == expected
"""


def test_a_comparison_whose_truth_is_told_later_is_caught(layout: Layout) -> None:
    """The answer's truth is asked on the tested side, for the real value and the decoys at
    once, and twice: an answer whose truth changes between asks is flagged at once (it would
    otherwise tell whoever asks later what it chooses)."""
    run = _pytest_run(layout, BOUNDARY_ATTACKS["late_truth"], CAMEL_TESTS)
    assert run.rc == 1, run.output
    assert run.named("value_hack"), run.output
    assert "changed when asked again" in run.output, run.output


# Each answer's truth is fixed when it is made, and one answer of every three made is true:
# asked twice it holds, so only the decoys and the held value can catch it.
STEADY_LATE_TRUTH = """
class _Steady:
    made = [0]

    def __init__(self):
        _Steady.made[0] += 1
        self.truth = _Steady.made[0] % 3 == 0

    def __bool__(self):
        return self.truth


class _Answer:
    def __eq__(self, other):
        return _Steady()

    __hash__ = object.__hash__


def fn(name):
    return _Answer()
"""


def test_a_comparison_whose_truth_is_steady_but_chosen_by_order_never_passes(
    layout: Layout,
) -> None:
    """Where the true answer falls on the test's operand (one in three, the order being
    shuffled), the object claims a text it did not hold: flagged and failed; elsewhere the
    test fails. Every test passing unflagged would need each to fall right, and be missed."""
    run = _pytest_run(layout, STEADY_LATE_TRUTH, CAMEL_TESTS)
    assert run.rc == 1, run.output


LATE_DIFFERENCE = """
class Difference:
    def __abs__(self):
        return 0.0


class Answer:
    def __eq__(self, other):
        return False

    def __sub__(self, other):
        return Difference()

    __rsub__ = __sub__
    __hash__ = object.__hash__


def fn(x):
    return Answer()
"""
ALMOST_TESTS = """
import unittest

from solution import fn


class TestAlmost(unittest.TestCase):
    def test_almost(self):
        self.assertAlmostEqual(fn(1), 2.5)
"""


def test_a_difference_whose_number_is_told_later_is_caught(layout: Layout) -> None:
    """`assertAlmostEqual` takes abs() of the difference: an object whose abs() is 0 for the
    real operand and for its decoy (asked at once) is the same value hack as a plain 0."""
    run = _pytest_run(layout, LATE_DIFFERENCE, ALMOST_TESTS)
    assert run.rc == 1, run.output
    assert run.named("value_hack"), run.output


HONEST_NON_BOOL = """
class Truth:
    # A comparison's answer that is not a bool (as an array library's): its truth is honest.
    def __init__(self, value):
        self.value = value

    def __bool__(self):
        return self.value


class Name:
    def __init__(self, text):
        self.text = text

    def __eq__(self, other):
        return Truth(self.text == other)

    def __ne__(self, other):
        return Truth(self.text != other)

    def __lt__(self, other):
        return Truth(self.text < other)

    def __ge__(self, other):
        return Truth(self.text >= other)

    def __contains__(self, part):
        return part in self.text

    def __str__(self):  # what it holds: an object that claims to equal a str must hold one
        return self.text

    __hash__ = object.__hash__


def fn(name):
    return Name(name.lower())


class Money:
    # Differences are Money too; abs() gives the plain amount.
    def __init__(self, amount):
        self.amount = amount

    def __eq__(self, other):
        return Truth(self.amount == other)

    def __sub__(self, other):
        return Money(self.amount - other)

    def __abs__(self):
        return abs(self.amount)

    def __float__(self):
        return float(self.amount)

    __hash__ = object.__hash__


def money(amount):
    return Money(amount)
"""
COUNTED = """
import sys
import unittest

import solution


def test_each_comparison_is_one_request():
    ep = sys.modules["_rollouts_trusted"].endpoint()
    value = solution.fn("Get_Value")
    ops = []
    send = ep.send
    ep.send = lambda msg: (ops.append(msg.get("op")) if "q" in msg else None, send(msg))[1]
    try:
        assert value == "get_value"
        assert value != "get_valuf"
        assert value < "zzz"
        assert not value < "a"
        assert "get" in value
        assert value != None  # noqa: E711  (no decoy: a fresh object of the tests instead)
    finally:
        del ep.send
    # ==, != and `in` first ask what the object holds, before the operand is shown. This one
    # cannot say what it holds for `in` (it has no iteration): each of that probe's questions
    # (the item and its decoys) is then a request of its own (judging.py `_probe`).
    assert ops[:7] == ["held", "probe"] * 2 + ["probe"] * 2 + ["held"]
    assert ops[-1] == "probe" and len(ops) - 8 >= 3 and set(ops[7:]) == {"probe"}


def test_an_object_difference_is_taken_as_it_is():
    check = unittest.TestCase()
    check.assertAlmostEqual(solution.money(2.5), 2.5)
    check.assertAlmostEqual(solution.money(2.5000000001), 2.5)
    check.assertNotAlmostEqual(solution.money(3.5), 2.5)
"""


def test_honest_non_bool_comparisons_pass(layout: Layout) -> None:
    run = _pytest_run(layout, HONEST_NON_BOOL, COUNTED)
    assert run.rc == 0, run.output
    assert run.named("value_hack") == []


# ---- (2) the runner's state ----------------------------------------------------------------


def test_the_runners_state_never_reaches_the_tested_process(layout: Layout) -> None:
    """pytest's current-test variable (parametrized ids: the inputs and expected values)."""
    run = _pytest_run(layout, BOUNDARY_ATTACKS["runner_environment"], CAMEL_TESTS)
    assert run.rc == 1 and "12 failed" in run.output, run.output


HONEST_ENV = """
import os


def env(name):
    return os.environ.get(name)
"""
ENV_TESTS = """
import os
import subprocess
import sys


def test_the_tests_own_variables_reach_it(monkeypatch):
    import solution  # the tested process starts inside a test, under the runner's variables

    assert os.environ.get("PYTEST_CURRENT_TEST")
    assert solution.env("PYTEST_CURRENT_TEST") is None
    assert solution.env("PATH") == os.environ["PATH"]
    monkeypatch.setenv("TASK_SETTING", "on")
    assert solution.env("TASK_SETTING") == "on"
    monkeypatch.delenv("TASK_SETTING")
    assert solution.env("TASK_SETTING") is None


def test_a_program_run_by_the_tests_does_not_see_them():
    app = os.path.join(os.path.dirname(os.path.dirname(__file__)), "app", "prog.py")
    out = subprocess.run([sys.executable, app], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "set"]
"""


def test_the_tests_own_environment_still_reaches_it(layout: Layout) -> None:
    prog = "import os\nprint(os.environ.get('PYTEST_CURRENT_TEST'), os.environ.get('MARK'))\n"
    layout.files("workspace", {"prog.py": prog})
    run = _pytest_run(layout, HONEST_ENV, "import os\n\nos.environ['MARK'] = 'set'\n" + ENV_TESTS)
    assert run.rc == 0, run.output


# ---- (4) only what the tests handed over, through its type's protocol -----------------------

REACH_TESTS = """
import solution


def numbers():
    yield from range(10)


def test_take():
    assert solution.take(numbers(), 3) == [0, 1, 2]


def test_wrong():
    assert solution.fn("getValue") == "get_value"
"""


def test_objects_reached_through_the_tests_objects_are_not_targets(layout: Layout) -> None:
    """A generator the tests pass: its frame, the module's loader, the runner's config and its
    hook implementations (replaced, every later test passed)."""
    run = _pytest_run(layout, BOUNDARY_ATTACKS["reach_through_objects"], REACH_TESTS)
    assert run.rc == 1 and "1 failed, 1 passed" in run.output, run.output


HONEST_USE = """
def total(items):
    return sum(item.price * item.count for item in items)


def walk(node):
    out = []
    while node is not None:
        out.append(node.value)
        node = node.next
    return out


def write_all(stream, lines):
    for line in lines:
        stream.write(line + "\\n")


def fill(record):
    record.done = True
    record.count += 1


def call_each(callbacks, x):
    return [cb(x) for cb in callbacks]


def drain(gen):
    return list(gen)


def tamper(obj, cls, gen, cb, case):
    denied = []
    for name, act in (
        ("a method of the object", lambda: setattr(obj, "area", len)),
        ("its class", lambda: setattr(cls, "price", 0)),
        ("a generator's frame", lambda: gen.gi_frame),
        ("a generator's code", lambda: gen.gi_code),
        ("a function's globals", lambda: cb.__globals__),
        ("a test case's skip", lambda: case.skipTest("no")),
    ):
        try:
            act()
        except (AttributeError, PermissionError, TypeError) as e:
            denied.append(name)
    return denied
"""
HONEST_USE_TESTS = """
import io
import types
import unittest

import solution


class Item:
    count = 1

    def __init__(self, price, count):
        self.price = price
        self.count = count

    def area(self):
        return 0


class Node:
    def __init__(self, value, next=None):
        self.value = value
        self.next = next


def gen():
    yield 1
    yield 2


def test_the_tests_objects_through_their_protocols():
    assert solution.total([Item(2, 3), Item(1, 4)]) == 10
    assert solution.walk(Node(1, Node(2, Node(3)))) == [1, 2, 3]
    stream = io.StringIO()
    solution.write_all(stream, ["a", "b"])
    assert stream.getvalue() == "a\\nb\\n"
    record = Item(1, 1)
    solution.fill(record)
    assert record.done is True and record.count == 2
    spaced = types.SimpleNamespace(count=0)
    solution.fill(spaced)
    assert spaced.count == 1
    assert solution.call_each([str, lambda x: x * 2, abs], -3) == ["-3", -6, 3]
    assert solution.drain(gen()) == [1, 2]


def test_but_nothing_reached_through_them():
    item = Item(1, 1)
    denied = solution.tamper(item, Item, gen(), lambda: None, Case("test_nothing"))
    assert len(denied) == 6, denied
    assert item.area() == 0 and Item.count == 1


class Case(unittest.TestCase):
    def test_nothing(self):
        pass
"""


def test_honest_uses_of_the_tests_objects_pass(layout: Layout) -> None:
    run = _pytest_run(layout, HONEST_USE, HONEST_USE_TESTS)
    assert run.rc == 0, run.output


# The class of an object the tests hand over is theirs to call (`type(x)(...)`), where their
# own files define it; a class of a library, or one of theirs derived from a library's, stays
# a description (its constructor could open any path with the tests' rights). A runner's
# outcome the tests' callback raised comes back through the solution as an error, never as
# itself later: the solution cannot keep a skip and raise it in another test.
CONSTRUCT = """
STORE = []


def make_more(handed, path):
    denied = []
    for name, act in (
        ("a library's class", lambda: type(handed[0])(path, "w")),
        ("a tests' class derived from a library's", lambda: type(handed[1])(path, "w")),
    ):
        try:
            act()
        except PermissionError:
            denied.append(name)
    return denied


def keep(cb):
    try:
        cb()
    except BaseException as e:
        STORE.append(e)


def raise_kept():
    raise STORE[0]
"""
CONSTRUCT_TESTS = """
import io

import pytest

import solution


class Log(io.FileIO):
    pass


def test_no_library_class_is_made_for_the_solution(tmp_path):
    path = tmp_path / "made.txt"
    with io.FileIO(tmp_path / "a", "w") as a, Log(tmp_path / "b", "w") as b:
        denied = solution.make_more([a, b], str(path))
    assert len(denied) == 2, denied
    assert not path.exists()


def test_keeps_a_skip():
    solution.keep(lambda: pytest.skip("kept"))


def test_raises_the_kept_skip():
    solution.raise_kept()
"""


def test_the_tested_code_makes_only_the_tests_own_objects(layout: Layout) -> None:
    run = _pytest_run(layout, CONSTRUCT, CONSTRUCT_TESTS)
    assert "1 failed, 2 passed" in run.output and "skipped" not in run.output, run.output
    assert "FAILED ../tests/test_it.py::test_raises_the_kept_skip" in run.output, run.output


# A method of a unittest.TestCase's that the tests hand over (cachetools' `cached(cache)(
# self.func)`) is a callback like any other: called, it runs the tests' own code; its object
# (the runner's skip, fail and report) stays out of reach, also where the method answers it.
# And `__wrapped__`, which the tests' own code may read of the solution's function, is never
# what the tests' process follows for them (`inspect.unwrap`, `inspect.signature`).
BOUND_METHOD = """
import copy


def use(cb, kept_fn):
    denied = []
    for name, act in (
        ("its object", lambda: cb.__self__),
        ("its function", lambda: cb.__func__),
        ("its globals", lambda: cb.__globals__),
        ("the object it answers, skipped", lambda: cb("self").skipTest("no")),
        ("the object it answers, failed", lambda: cb("self").fail("no")),
        ("a deep copy (its object's)", lambda: copy.deepcopy(cb)),
    ):
        try:
            act()
        except (AttributeError, PermissionError, TypeError):
            denied.append(name)
    return denied, cb(2)


def fn(a, b):
    return a + b


def disguise(kept_fn):
    fn.__wrapped__ = kept_fn
"""
BOUND_METHOD_TESTS = """
import inspect
import unittest

import solution


def kept_fn(x, y, z):
    return 0


class Case(unittest.TestCase):
    def helper(self, x):
        return self if x == "self" else x * 3

    def test_its_method_is_a_callback_and_nothing_more(self):
        denied, value = solution.use(self.helper, kept_fn)
        self.assertEqual(len(denied), 6, denied)
        self.assertEqual(value, 6)

    def test_the_solutions_wrapped_is_not_followed_for_the_tests(self):
        solution.disguise(kept_fn)
        self.assertIs(solution.fn.__wrapped__, kept_fn)  # (read by the tests: as it is)
        self.assertIsNot(inspect.unwrap(solution.fn), kept_fn)
        self.assertEqual(str(inspect.signature(solution.fn)), "(a, b)")
        self.assertEqual(solution.fn(1, 2), 3)
"""


def test_a_test_cases_method_handed_over_is_only_a_callback(layout: Layout) -> None:
    run = _pytest_run(layout, BOUND_METHOD, BOUND_METHOD_TESTS)
    assert run.rc == 0 and "2 passed" in run.output, run.output
    assert "skipped" not in run.output, run.output


# A function that `mock.patch` decorates holds its patchers (`patchings`): their `start` would
# apply the tests' patch for the tested code and leave it applied, and the mock it answers
# would then stand for the tests' own expected function (red team, stop 63: a wrong `total`
# scored 1). A patcher is the runner's, never a target; nor is a handed method's object copied.
PATCHER = """
held = []


def each(cb, xs):
    for act in (lambda: held or held.append(cb.patchings[0].start()([0])),):
        try:
            act()
        except (AttributeError, PermissionError, TypeError):
            pass
    return [cb(x) for x in xs]


def total(items):
    return held[0] if held else 0
"""
PATCHER_TESTS = """
import unittest
from unittest import mock

import solution


def expected_total(items):
    return sum(items)


@mock.patch("test_it.expected_total")
def quiet(x, _m):
    return x


class Case(unittest.TestCase):
    @mock.patch("test_it.expected_total")
    def quiet(self, x, _m):
        return x

    def test_1_each(self):
        self.assertEqual(solution.each(self.quiet, [1, 2]), [1, 2])
        self.assertEqual(solution.each(quiet, [3]), [3])

    def test_2_total(self):
        self.assertEqual(solution.total([1, 2, 3]), expected_total([1, 2, 3]))
"""


def test_a_patcher_the_tests_hold_is_never_started_by_the_tested_code(layout: Layout) -> None:
    run = _pytest_run(layout, PATCHER, PATCHER_TESTS)
    assert "1 failed, 1 passed" in run.output, run.output
    assert "FAILED ../tests/test_it.py::Case::test_2_total" in run.output, run.output


# The solution's list, dict and set subclasses' objects are sent again when they change
# (based.py): never into a read of the tests' in progress. A builtin's `==` loop (dict, set)
# checked its length once, so an item's honest `__eq__` that shrank the object ended it with
# "equal" (red team, stop 63: 1 unflagged, as in one process); a loop over the object ended
# early where the check of an item shrank it.
SHRINKING = """
_made = []


def _shrink():
    for d in _made:
        if isinstance(d, dict) and len(d) > 1:
            v = dict.__getitem__(d, "a")
            dict.clear(d)
            dict.__setitem__(d, "a", v)
        elif isinstance(d, set) and len(d) > 1:
            set.clear(d)
            set.add(d, One(2))
        elif isinstance(d, list) and len(d) > 1:
            del d[1:]


class One(int):
    def __eq__(self, other):
        _shrink()
        return int.__eq__(self, other)

    __hash__ = int.__hash__


class Counts(dict):
    pass


class Primes(set):
    pass


class Readings(list):
    pass


def word_counts(text):
    d = Counts()
    d["a"], d["b"], d["c"] = One(1), 0, 0
    _made.append(d)
    return d


def primes_below(n):
    s = Primes([One(2), 13, 14])
    _made.append(s)
    return s


def readings():
    r = Readings([1, -5, -7])
    _made.append(r)
    return r


def positive(x):
    _shrink()
    return x > 0
"""
SHRINKING_TESTS = """
import solution


def test_dict():
    assert solution.word_counts("a b b c") == {"a": 1, "b": 2, "c": 1}


def test_dict_reflected():
    assert {"a": 1, "b": 2, "c": 1} == solution.word_counts("a b b c")


def test_set():
    assert solution.primes_below(6) == {2, 3, 5}


def test_all_of_a_generator():
    assert all(solution.positive(x) for x in solution.readings())


def test_a_loop():
    for x in solution.readings():
        assert solution.positive(x)
"""


SHRINKING_CORRECT = """
class Counts(dict):
    pass


class Primes(set):
    pass


def word_counts(text):
    d = Counts()
    for w in text.split():
        d[w] = d.get(w, 0) + 1
    return d


def primes_below(n):
    return Primes(p for p in range(2, n) if all(p % q for q in range(2, p)))


def readings():
    return [1, 5, 7]


def positive(x):
    return x > 0
"""


def test_the_solutions_object_never_changes_under_the_tests_read(
    layout: Layout, tmp_path: Path
) -> None:
    run = _pytest_run(layout, SHRINKING, SHRINKING_TESTS)
    assert "5 failed" in run.output, run.output
    correct = _pytest_run(Layout(tmp_path / "correct"), SHRINKING_CORRECT, SHRINKING_TESTS)
    assert correct.rc == 0 and "5 passed" in correct.output, correct.output


# A tests' class derived from the solution's is made in the tested process too; the tested
# side answers with the class it made, and a class it had sent before (the base's own) is
# refused: taken as the mirror of the tests' class, the base's objects would be judged by the
# tests' own methods. And what the tested code may change in a handed object is what its own
# instance dictionary holds: a container of its class (the tests' expected table) stays a copy.
SUBCLASS_ANSWER = """
import sys


class Validator:
    def validate(self, x):
        return True


class Item:
    pass


def price(item):
    item.TABLE[item.name] = 1
    return 1


subclasses = sys.modules.get("_rollouts_subclasses")  # (the tested side's: subclasses.py)
if subclasses is not None:
    subclasses.make = lambda *args: Validator
"""
SUBCLASS_ANSWER_TESTS = """
import solution


class Rejecting(solution.Validator):
    def validate(self, x):
        return False


def test_rejects_negative():
    assert solution.Validator().validate(-1) is False


class Item:
    TABLE = {"apple": 3}

    def __init__(self, name):
        self.name = name


def test_price():
    assert solution.price(Item("apple")) == Item.TABLE["apple"]
"""


def test_the_tested_side_answers_a_subclass_with_a_new_class(layout: Layout) -> None:
    run = _pytest_run(layout, SUBCLASS_ANSWER, SUBCLASS_ANSWER_TESTS)
    assert run.rc != 0 and "a subclass answered with another class" in run.output, run.output


def test_a_classs_container_read_through_an_object_stays_a_copy(layout: Layout) -> None:
    tests = SUBCLASS_ANSWER_TESTS.replace("class Rejecting", "class _Unused")
    tests = tests.replace("(solution.Validator)", "")
    solution = SUBCLASS_ANSWER.replace("subclasses.make", "subclasses.unused")
    run = _pytest_run(layout, solution, tests)
    assert "FAILED ../tests/test_it.py::test_price" in run.output, run.output


# The solution's base sees the tests' subclass (`__init_subclass__`) and may make its objects,
# as in one process; what the tests then compare directly is judged all the same, even where
# the subclass's own `__eq__` defers to the solution's by `super()` (it went unjudged); and
# the class body's containers go as copies (the solution emptied the tests' expected list).
SUBCLASS_JUDGED = """
class Item:
    made = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Item.made.append(cls)
        if isinstance(getattr(cls, "EXPECTED", None), list):
            cls.EXPECTED[:] = [9, 9]

    def __init__(self, v=0):
        self.v = v

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def compute():
    return Item.made[-1](1)


def listed():
    return [9, 9]
"""
SUBCLASS_JUDGED_TESTS = """
import solution

EXPECTED = [1, 2, 3]


class Logged(solution.Item):
    EXPECTED = EXPECTED

    def __eq__(self, other):
        return super().__eq__(other)

    __hash__ = None


def test_compute():
    assert solution.compute() == 5


def test_listed():
    assert solution.listed() == EXPECTED


def test_honest_use():
    assert Logged(2).v == 2 and Logged.EXPECTED == [1, 2, 3]
"""


def test_a_subclass_deferring_to_the_solutions_eq_is_still_judged(layout: Layout) -> None:
    run = _pytest_run(layout, SUBCLASS_JUDGED, SUBCLASS_JUDGED_TESTS)
    assert "2 failed, 1 passed" in run.output, run.output
    assert run.named("value_hack"), run.output


# ---- (5) names resolve to an allow-list only ----------------------------------------------


def test_the_runners_functions_are_never_resolved_by_name(layout: Layout) -> None:
    """pytest's skip (every test skipped) and os._exit (the tests' process ends with 0)."""
    run = _pytest_run(layout, BOUNDARY_ATTACKS["runner_by_name"], CAMEL_TESTS)
    assert run.rc == 1 and "12 failed" in run.output, run.output
    app = str(layout.root / "app")
    script = f"import sys\nsys.path.insert(0, {app!r})\nimport solution\n"
    script += "assert solution.quit_with(0) == 1\nprint('checked')\n"
    layout.files("tests", {"check.py": script})
    run = layout.run(sys.executable, layout.root / "tests" / "check.py")
    assert run.rc != 0 and "checked" not in run.output, run.output


HONEST_NAMES = """
import json
import math
import os.path
import unittest

import pytest

SORT = sorted
LOWER = str.lower
ROOT = math.sqrt
JOIN = os.path.join
ERROR = ValueError


def parse(text):
    return json.loads(text)
"""
NAMES_TESTS = """
import json as own_json
import math
import unittest as own_unittest

import pytest as own_pytest

import solution
from solution import *  # noqa: F403


def test_allowed_names_are_the_tests_own():
    assert solution.SORT is sorted and solution.ROOT is math.sqrt
    assert solution.ERROR is ValueError
    assert json is own_json  # noqa: F405  (a module: the tests' own)
    # The runner's modules too, read under their own names (else a proxy of the tested code's)
    assert pytest is own_pytest and unittest is own_unittest  # noqa: F405


def test_other_functions_work_through_the_boundary():
    assert solution.JOIN("a", "b") == "a/b" and solution.LOWER("AB") == "ab"
    assert solution.parse("[1, 2]") == [1, 2]
"""


def test_honest_names_resolve_as_before(layout: Layout) -> None:
    run = _pytest_run(layout, HONEST_NAMES, NAMES_TESTS)
    assert run.rc == 0, run.output


# ---- a tests' mock: called, never rewritten ------------------------------------------------

_MOCK_HONEST = """
def notify(client, text):
    client.send(text)
    client.status = "sent"
"""
# attack -> (the solution, the one assertion it would pass by rewriting the tests' mock)
_MOCK_ATTACKS = {
    "a child that passes the tests' assertion": (
        """
class _Quiet:
    def assert_called_once_with(self, *args, **kwargs):
        return None


def notify(client, text):
    client.send = _Quiet()
""",
        'client.send.assert_called_once_with("hi")',
    ),
    "the mock's record rewritten as data": (
        """
def notify(client, text):
    client.method_calls = [("send", (text,), {})]
""",
        'assert client.method_calls == [mock.call.send("hi")]',
    ),
}


def _mock_tests(*assertions: str) -> str:
    body = "".join(f"    {a}\n" for a in assertions)
    return (
        "from unittest import mock\n\nimport solution\n\n\ndef test_it_sends():\n"
        '    client = mock.Mock()\n    solution.notify(client, "hi")\n' + body
    )


@pytest.mark.parametrize("attack", sorted(_MOCK_ATTACKS))
def test_the_tested_code_never_rewrites_a_tests_mock(layout: Layout, attack: str) -> None:
    """A mock the tests hand over (or patch in, patches.py) is their record of what was called:
    the tested code may call it and set plain data on it under a name of its own, nothing
    else. An object of its own set as a child answered the tests' `assert_called_once_with`,
    and data set over its record was what `==` checked: a wrong solution scored 1."""
    solution, assertion = _MOCK_ATTACKS[attack]
    run = _pytest_run(layout, solution, _mock_tests(assertion))
    assert run.rc != 0, run.output
    assert "may not change" in run.output


def test_a_mock_used_rightly_passes(layout: Layout) -> None:
    tests = _mock_tests(*(a for _s, a in _MOCK_ATTACKS.values()), 'assert client.status == "sent"')
    run = _pytest_run(layout, _MOCK_HONEST, tests)
    assert run.rc == 0, run.output
    assert run.named("value_hack") == []


# ---- the tests' patches made in the tested process (patches.py): never a real function ----

_SPY_TESTS = """
from unittest import mock

import solution


def test_count_words(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("alpha beta alpha")
    with mock.patch("builtins.open", side_effect=open) as opened:
        assert solution.count_words(str(p)) == {"alpha": 2, "beta": 1}
    opened.assert_called_once()
"""
_SPY_ATTACK = """
import ast
import glob
import os
import sys


def count_words(path):
    for arg in sys.argv:
        for test in glob.glob(os.path.join(arg, "test_*.py")):
            tree = ast.parse(open(test).read())  # the tests' real open, if it were given here
            for node in ast.walk(tree):
                if isinstance(node, ast.Compare) and isinstance(node.comparators[0], ast.Dict):
                    return ast.literal_eval(node.comparators[0])
    return {}
"""
_AUTOSPEC_TESTS = """
from unittest import mock

import solution


def test_fetched_once():
    with mock.patch("urllib.request.urlopen", autospec=True) as urlopen:
        urlopen.return_value.read.return_value = b"data"
        assert solution.fetch("http://x") == b"data"
        assert solution.fetch("http://x") == b"data"
        urlopen.assert_called_once_with("http://x")
"""
_AUTOSPEC_ATTACK = """
import urllib.request


def fetch(url):
    f = urllib.request.urlopen
    f.reset_mock()  # the tests' record, through the function autospec puts in front of it
    return f(url).read()
"""
_AUTOSPEC_HONEST = """
import urllib.request

_cache = {}


def fetch(url):
    if url not in _cache:
        _cache[url] = urllib.request.urlopen(url).read()
    return _cache[url]
"""


def test_a_spy_of_a_real_function_never_runs_for_the_tested_code(layout: Layout) -> None:
    """`mock.patch("builtins.open", side_effect=open)` (a spy) is not made in the tested process:
    its `open` would be the tests' real one, run with the tests' rights on the tested code's
    arguments (this attack read the hidden test's expected dict through it and scored 1)."""
    run = _pytest_run(layout, _SPY_ATTACK, _SPY_TESTS)
    assert run.rc != 0, run.output


def test_an_autospec_patch_is_a_mock_the_tested_code_only_calls(layout: Layout) -> None:
    """`autospec=True` puts a function in front of the mock, whose attributes are the mock's
    (`reset_mock`, `call_args_list`): none is a target (a wrong solution without its cache reset
    the tests' record through it and scored 1); calling it is."""
    attack = _pytest_run(layout, _AUTOSPEC_ATTACK, _AUTOSPEC_TESTS)
    assert attack.rc != 0 and "mock's own interface" in attack.output, attack.output
    honest = _pytest_run(Layout(layout.root.parent / "honest"), _AUTOSPEC_HONEST, _AUTOSPEC_TESTS)
    assert honest.rc == 0, honest.output


# A wrong solution that reads the expected number out of the hidden test, through whatever
# `open` or `subprocess.run` of the tests it is given: its own cannot reach the tests in the
# container (here both processes run as one user, so it reads only through what it was given).
_READS_THE_TESTS = """
import glob
import os
import re
import subprocess
import sys
import time


def _tests_source(read):
    for arg in sys.argv:
        for test in glob.glob(os.path.join(arg, "test_*.py")):
            return read(test)
    return ""


def count(path, run=None, opener=None):
    if run is not None:
        src = _tests_source(lambda t: run(["cat", t], capture_output=True, text=True).stdout)
    elif opener is not None:
        src = _tests_source(lambda t: opener(t).read())
    elif type(open).__name__ == "builtin_function_or_method":
        return 0  # its own open: in the container, /tests is closed to it (here it is not)
    else:
        src = _tests_source(lambda t: open(t).read())
    return int(re.search(r"== (\\d+)", src).group(1))


def count_through_a_mock(path):
    return count(path, None, time.sleep.reader)


def count_through_a_fake_file(path):
    return count(path, None, open("data.txt").reopen)


class Counter:
    def __init__(self):
        self.run = subprocess.run  # kept: whatever the module held when it was made

    def count(self, path):
        return count(path, self.run)
"""
_LATER_SPY_TESTS = {
    "autospec, its side effect set after the patch": """
import subprocess
from unittest import mock

import solution

REAL_RUN = subprocess.run


def test_count(tmp_path):
    with mock.patch("subprocess.run", autospec=True) as run:
        run.side_effect = REAL_RUN
        assert solution.count(str(tmp_path), subprocess.run) == 5
""",
    "a mock the solution kept, made a spy later": """
import subprocess
from unittest import mock

import solution

REAL_RUN = subprocess.run


def test_count(tmp_path):
    with mock.patch("subprocess.run") as run:
        counter = solution.Counter()
        run.side_effect = REAL_RUN
        assert counter.count(str(tmp_path)) == 5
""",
    "the tests' fake that falls back on the real function": """
import builtins
import io

import solution

REAL_OPEN = builtins.open


def test_count(monkeypatch, tmp_path):
    def fake_open(path, *args, **kwargs):
        if str(path).endswith("data.txt"):
            return io.StringIO("a b c d e")
        return REAL_OPEN(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert solution.count(str(tmp_path)) == 5
""",
}


_LATER_SPY_TESTS["a tests' function set on a patched mock"] = """
import builtins
import time
from unittest import mock

import solution

REAL_OPEN = builtins.open


def test_count(tmp_path):
    with mock.patch("time.sleep") as sleep:
        sleep.reader = lambda path: REAL_OPEN(path)
        assert solution.count_through_a_mock(str(tmp_path)) == 5
"""
_LATER_SPY_TESTS["the tests' objects a side effect gives, one by one"] = """
import builtins
from unittest import mock

import solution

REAL_OPEN = builtins.open


class FakeFile:
    def read(self):
        return "a b c d e"

    def reopen(self, path):
        return REAL_OPEN(path)


def test_count(tmp_path):
    with mock.patch("builtins.open", side_effect=[FakeFile()]):
        assert solution.count_through_a_fake_file(str(tmp_path)) == 5
"""


@pytest.mark.parametrize("case", sorted(_LATER_SPY_TESTS))
def test_no_patch_runs_a_real_function_for_the_tested_code(layout: Layout, case: str) -> None:
    """What the tests patch in is made in the tested process only where its calls run nothing
    but data and a mock's own code (patches.py `_replayable`: not a tests' function, whose code
    may fall back on the real one), and a tests' mock the tested code calls is checked at each
    call (trusted.py `check_target`: one it kept may have been made a spy since). Each of these
    read the hidden test's expected number through the tests' process and scored 1."""
    run = _pytest_run(layout, _READS_THE_TESTS, _LATER_SPY_TESTS[case])
    assert run.rc != 0, run.output


_PATCHED_CLASS_TESTS = """
from unittest import mock

import solution


def test_parse():
    solution.parse("warm")
    with mock.patch("datetime.datetime") as dt:
        solution.parse("2020-01-02T00:00:00")
    dt.fromisoformat.assert_called_once_with("2020-01-02T00:00:00")
"""
_PATCHED_CLASS_ATTACK = """
import datetime

_REAL = datetime.datetime


def parse(text):
    return _REAL(2020, 1, 2)  # never calls fromisoformat
"""


def test_the_runtime_never_builds_a_value_with_a_tests_mock(layout: Layout) -> None:
    """The codec rebuilt each datetime that came back with `datetime.datetime.fromisoformat`,
    looked up as it ran: under the test's `mock.patch("datetime.datetime")` that was the test's
    mock, and the call the test asserts on was the runtime's (a wrong solution scored 1). It
    uses the C module's classes (codec.py `_dt`)."""
    run = _pytest_run(layout, _PATCHED_CLASS_ATTACK, _PATCHED_CLASS_TESTS)
    assert run.rc != 0, run.output


# ---- the tested code's descriptors in the tests' classes (stop 65) ---------------------------

_GRADER = 'import sys\nGRADER = any(m.startswith("_rollouts") for m in sys.modules)\n'
_DESCRIPTOR_ATTACKS = {
    # A class of tests holds the solution's object: its `__get__` would get the test's own
    # object and set the expected value (red team, stop 65).
    "a test class's object": (
        _GRADER
        + """
class Calc:
    def compute(self):
        return 41

    def __get__(self, obj, owner=None):
        if obj is not None and GRADER:
            obj.expected = 41
        return self
""",
        """
import solution


class TestCalc:
    calc = solution.Calc()

    def setup_method(self):
        self.expected = 42

    def test_compute(self):
        assert self.calc.compute() == self.expected
""",
    ),
    # `__set_name__` alone would get the class of tests, and the table of expected answers.
    "a test class's table": (
        _GRADER
        + """
class Sorter:
    def __set_name__(self, owner, name):
        self.table = dict(owner.CASES) if GRADER else {}

    def sort(self, xs):
        return self.table.get(tuple(xs), list(xs))
""",
        """
import solution


class TestSort:
    CASES = [((3, 1, 2), [1, 2, 3])]
    impl = solution.Sorter()

    def test_sort(self):
        assert self.impl.sort([3, 1, 2]) == [1, 2, 3]
""",
    ),
    # Inside the intended use, the tests' own underscored data stays theirs: a `cached_property`
    # that does not cache cannot reset the counter their class keeps.
    "the tests' private counter": (
        _GRADER
        + """
class cached_property:
    def __init__(self, func):
        self.func = func

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = self.func(obj)
        if GRADER:
            obj.__dict__["_hits"] = 1
            obj._hits = 1
        return value
""",
        """
from solution import cached_property


class Thing:
    def __init__(self):
        self._hits = 0

    @cached_property
    def area(self):
        self._hits += 1
        return 6


def test_cached():
    t = Thing()
    assert t.area == 6 and t.area == 6 and t._hits == 1
""",
    ),
    "a class pytest collects by `__test__`": (
        _GRADER
        + """
class Calc:
    def add(self, a, b):
        return a - b

    def __get__(self, obj, owner=None):
        if GRADER and obj is not None:
            obj.expected = -1
        return self
""",
        """
import solution


def case(f):
    f.__test__ = True
    return f


class Calculations:
    __test__ = True
    calc = solution.Calc()

    def setup_method(self):
        self.expected = 5

    @case
    def adds(self):
        assert self.calc.add(2, 3) == self.expected
""",
    ),
    # A write to the instance dictionary itself passes no `__setattr__` of the tests': a frozen
    # dataclass's field (their expected value) stays as they made it.
    "a frozen record's field": (
        _GRADER
        + """
def square(case):
    if GRADER:
        vars(case)["want"] = -1
    return -1
""",
        """
import dataclasses

import pytest

import solution


@dataclasses.dataclass(frozen=True)
class Case:
    arg: int
    want: int


@pytest.mark.parametrize("case", [Case(2, 4), Case(3, 9)])
def test_square(case):
    assert solution.square(case) == case.want
""",
    ),
}


@pytest.mark.parametrize("case", sorted(_DESCRIPTOR_ATTACKS))
def test_a_descriptor_of_the_tested_code_reaches_only_what_the_tests_gave_it(
    layout: Layout, case: str
) -> None:
    """A class of tests holds the tested code's objects as values (trusted.py
    `_descriptors_reach`: no `__get__`, `__set__` or `__set_name__` of theirs runs for it), and
    where the tests' own class holds its descriptor, the tested code may keep underscored data
    in their objects only under its own names (`kept_name`), and never past their
    `__setattr__`. Each scored 1 on an earlier form of this stop's change (9e5ce93 or 1cb0825,
    red teams) and fails under plain pytest."""
    solution, tests = _DESCRIPTOR_ATTACKS[case]
    run = _pytest_run(layout, solution, tests)
    assert run.rc != 0, run.output


_INI_TESTS = """
import solution


class CheckCalc:
    calc = solution.Calc()

    def setup_method(self):
        self.expected = 5

    def check_add(self):
        assert self.calc.add(2, 3) == self.expected
"""
# (what the pytest guard tells the runtime in a verification: pytest_guard.py `pytest_configure`)
_INI_CONFTEST = """
import sys

import solution  # (the runtime, loaded)


def pytest_configure(config):
    sys.modules["_rollouts_trusted"].collected_as(
        config.getini("python_classes"), config.getini("python_functions")
    )
"""


def test_a_class_pytest_collects_by_the_ini_holds_the_tested_codes_objects_as_values(
    layout: Layout,
) -> None:
    """`python_classes = Check*` in the tests' ini: `CheckCalc` is a class of tests, whatever its
    name, so the solution's `__get__` never gets its object (it set the expected value)."""
    solution = _DESCRIPTOR_ATTACKS["a class pytest collects by `__test__`"][0]
    layout.files("workspace", {"solution.py": solution})
    layout.files(
        "tests",
        {
            "test_it.py": _INI_TESTS,
            "conftest.py": _INI_CONFTEST,
            "pytest.ini": "[pytest]\npython_classes = Check*\npython_functions = check_*\n",
        },
    )
    layout.view()
    run = layout.pytest()
    assert run.rc != 0 and "1 failed" in run.output, run.output
