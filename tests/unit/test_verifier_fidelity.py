"""Fidelity of the verifier's process boundary (issue 34): what a correct solution returns or
raises reaches the tests as what it is, and what the tests pass reaches the solution as what
it is, so no correct solution scores 0 because of the boundary. Each case is a task shape that
plain pytest passes; they run through the real runtime (`Layout`: view.py, pytest, the tested
process), without Docker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.test_verifier_runtime import RUNTIME, Layout, Run


def _graded(tmp_path: Path, solution: str, name: str, tests: str) -> Run:
    """pytest on test file `name` through the runtime, the workspace's solution.py `solution`."""
    layout = Layout(tmp_path / "verifier")
    layout.files("workspace", {"solution.py": solution})
    layout.files("tests", {name: tests})
    layout.view()
    return layout.pytest()


SOLUTION = '''
import argparse
import collections
import collections.abc
import contextlib
import copy
import csv
import dataclasses
import datetime
import enum
import itertools
import json
import os
import pstats
import re
import subprocess
import sys
import typing
import urllib.parse

import annotated_types


def count(items):
    """A real held-out task's oracle: sized things by len, the rest by iterating."""
    if isinstance(items, collections.abc.Sized):
        return len(items)
    return sum(1 for _ in items)


def kinds(x):
    abc = collections.abc
    return {
        "sized": isinstance(x, abc.Sized),
        "iterable": isinstance(x, abc.Iterable),
        "iterator": isinstance(x, abc.Iterator),
        "callable": callable(x),
        "hashable": isinstance(x, abc.Hashable),
        "mapping": isinstance(x, abc.Mapping),
        "sequence": isinstance(x, abc.Sequence),
    }


class Plain:
    pass


class Bag:
    def __init__(self):
        self.items = [1, 2]

    def __len__(self):
        return len(self.items)

    def __eq__(self, other):
        return isinstance(other, Bag) and other.items == self.items

    __hash__ = None


class Table(collections.abc.Mapping):
    def __getitem__(self, key):
        return {"a": 1}[key]

    def __iter__(self):
        return iter(["a"])

    def __len__(self):
        return 1


def plain():
    return Plain()


def bag():
    return Bag()


def table():
    return Table()


def parse(text):
    return json.loads(text)


def rows(text):
    return list(csv.reader(text.splitlines(), strict=True))


def run(code):
    return subprocess.run([sys.executable, "-c", "import sys; sys.exit(%d)" % code], check=True)


def split(url):
    return urllib.parse.urlsplit(url)


def bound(n):
    return annotated_types.Gt(n)


def profile_row():
    return pstats.FunctionProfile("1", 0.5, 0.5, 1.0, 1.0, "f.py", 3)


def bump_row(row):
    row.line_number += 1


def parse_args(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--n", type=int, default=1)
    return parser.parse_args(argv)


def set_defaults(ns):
    ns.n += 1
    ns.extra = "x"


def match(pattern, text):
    return re.match(pattern, text)


@dataclasses.dataclass
class Item:
    name: str
    qty: int = 1
    note: str = dataclasses.field(default="", init=False)


def item(name, qty):
    return Item(name, qty)


def as_dict(config):
    return dataclasses.asdict(config)


class ConfigError(json.JSONDecodeError):
    pass


def load_config(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(e.msg, e.doc, e.pos) from None


def shadowing_namespace():
    return argparse.Namespace(_get_kwargs=lambda: [("forged", 1)], n=1)


def shadowing_error():
    error = json.JSONDecodeError("bad", "doc", 0)
    error.with_traceback = lambda tb: error
    raise error


def skip():
    import pytest

    pytest.skip("not me")


def unittest_skip():
    import unittest

    raise unittest.SkipTest("not me")


def exit():
    import pytest

    pytest.exit("not me", returncode=0)


def fn(a, b=2):
    """Adds."""
    return a + b


class Offset(datetime.tzinfo):
    """parse's FixedTzOffset, in short: the solution's own tzinfo class."""

    def __init__(self, minutes, name):
        self.minutes, self.name = minutes, name

    def utcoffset(self, dt):
        return datetime.timedelta(minutes=self.minutes)

    def dst(self, dt):
        return datetime.timedelta(0)

    def tzname(self, dt):
        return self.name


def stamp(minutes):
    return datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=Offset(minutes, "X"))


def clock():
    return datetime.time(3, 4, tzinfo=Offset(60, "Y"))


def zones():
    utc = datetime.datetime(2020, 1, 2, tzinfo=datetime.timezone.utc)
    return utc, datetime.timezone(datetime.timedelta(hours=2)), datetime.timezone.utc


def offset_of(value):
    return value.utcoffset()


def name_of(tz):
    return tz.tzname(None) if isinstance(tz, datetime.timezone) else None


class Seq:
    def __init__(self, items):
        self.items = items

    def __getitem__(self, item):
        if item is Ellipsis:
            return tuple(self.items)
        if not isinstance(item, (int, slice)):
            raise TypeError(type(item).__name__)
        return self.items[item]


def seq(*items):
    return Seq(list(items))


WORDS = {"sheep"}  # inflection's UNCOUNTABLES, in short
RULES = ["a"]
TABLE = {"k": 1}


def is_word(w):
    return w in WORDS


def rules():
    return list(RULES)


def table_keys():
    return sorted(TABLE)


def fields_of(row):
    return list(row._fields), row._asdict(), isinstance(row, tuple)


def same(x):
    return x


def read_in(folder):
    with open(os.path.join(folder, "in.txt")) as f:
        text = f.read()
    with open(os.path.join(folder, "out.txt"), "w") as f:
        f.write(text.upper())
    return text


class OwnWarning(UserWarning):
    pass


def warns(times, category=DeprecationWarning):
    import warnings

    for _ in range(times):
        warnings.warn("old api", category, stacklevel=2)
    return times


class Word(str):
    """A subclass of str of the solution's, with methods and state of its own."""

    def shout(self):
        return self.upper() + "!" + str(os.getpid())

    def upper(self):  # over str's: the solution's runs
        return "UP:" + str.upper(self)


class Count(int):
    def __str__(self):
        return "count %d" % self


class Default(dict):
    def __missing__(self, key):
        return "missing " + key


class Stack(list):
    def top(self):
        return self[-1]


class Size(enum.IntEnum):
    S = 1
    L = 3


class Shade(str, enum.Enum):
    DARK = "dark"
    LIGHT = "light"


class Perm(enum.IntFlag):
    R = 4
    W = 2


MinMax = collections.namedtuple("MinMax", "lo hi")


class Span(typing.NamedTuple):
    start: int
    end: int = 0

    def length(self):
        return self.end - self.start


def words():
    w = Word("ada")
    w.lang = "en"
    return w, Word("bob")


def counted(n):
    return Count(n)


def defaults():
    return Default(a=1)


def stack():
    return Stack([1, 2, 3])


def pid():
    return os.getpid()


def as_dict_of(d):
    return dict(d)


def minmax(xs):
    return MinMax(min(xs), max(xs))


def span(a, b):
    return Span(a, b)


def kinds_of(*values):
    return [(type(v).__name__, isinstance(v, str), isinstance(v, int), str(v)) for v in values]


def peek(x):
    try:
        return "read", len(x), x[0]
    except PermissionError as e:
        return "refused", type(e).__name__


def exit_code(code):
    return isinstance(code, int), int(code), code.name, code == 1, {code: "failed"}[1], str(code)


def tag(x):
    try:
        x.note = 1
    except PermissionError:
        return "refused"
    return "set"


def caught_warning():
    import warnings

    try:
        warnings.warn("old api", DeprecationWarning)
    except DeprecationWarning as e:
        return "caught " + str(e)
    return "not raised"


class Logger:
    """Keeps the list it is given and appends to it in later calls."""

    def __init__(self, sink):
        self.sink = sink

    def log(self, text):
        self.sink.append(text)

    def sink_is(self, other):
        return self.sink is other


class Settings:
    """Keeps the dict it is given and reads the tests' later changes."""

    def __init__(self, config):
        self.config = config

    def get(self, key):
        return self.config[key]

    def add_group(self, name):
        self.config[name] = []

    def add_to(self, name, item):
        self.config[name].append(item)


def scaled(n, state):
    for i in range(n):
        yield i * state["k"]


def tee_both(it):
    a, b = itertools.tee(it)
    return list(a), list(b)


def has_copy(x):
    return hasattr(x, "__copy__")


def walk(it, visit):
    return [(x, visit(x)) for x in it]


@contextlib.contextmanager
def managed(log):
    try:
        yield log
    finally:
        log.append("exit")


def quiet():
    return contextlib.suppress(KeyError)


def guarded(log):
    log.append("enter")
    try:
        yield 5
    except ValueError:
        log.append("caught")
        raise
    finally:
        log.append("exit")


async def guarded_async(log):
    log.append("enter")
    try:
        yield 5
    except ValueError:
        log.append("caught")
        raise
    finally:
        log.append("exit")


def answering():
    try:
        yield 1
    except KeyError:
        yield "caught"


def checked_width(n):
    if n < 0:
        raise ValueError("bad width: %d" % n)
    return n


def iterate(items):
    return iter(items)


def walk_changing(it, items):
    out = []
    for x in it:
        out.append(x)
        if x == 1:
            items[2] = "changed"
    return out


class Keeper:
    def __init__(self):
        self.items = list(range(10))

    def get(self):
        return self.items


class Items:
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def touch(self, x):
        if x == 3:
            self.items[5] = "changed"
        if x == 7:
            self.items.append("more")
        if x == "more":
            del self.items[1:]
        return x


def copied(x):
    return copy.copy(x)


def first_of(items):
    return items[0]


@dataclasses.dataclass(frozen=True)
class Coord:
    x: int
    y: int


class Keyed:
    def __init__(self, key):
        self.key = key

    def __eq__(self, other):
        return isinstance(other, Keyed) and other.key == self.key

    __hash__ = None
'''

TESTS = """
import argparse
import asyncio
import collections
import collections.abc
import contextlib
import copy
import csv
import dataclasses
import datetime
import inspect
import itertools
import json
import pstats
import subprocess
import sys
import types
from urllib.parse import SplitResult

import annotated_types
import pytest

import solution


def test_an_iterator_argument_is_not_sized():
    assert solution.count(iter([1, 2, 3])) == 3
    assert solution.count(x for x in "ab") == 2
    assert solution.count([1, 2]) == 2


def test_abcs_answer_as_for_the_real_object_on_both_sides():
    tests_side = solution.kinds(iter([1]))
    assert tests_side == {
        "sized": False, "iterable": True, "iterator": True, "callable": False,
        "hashable": True, "mapping": False, "sequence": False,
    }
    assert solution.kinds(lambda: 1)["callable"] is True
    plain, bag, table = solution.plain(), solution.bag(), solution.table()
    assert not callable(plain) and not isinstance(plain, collections.abc.Sized)
    assert isinstance(bag, collections.abc.Sized) and len(bag) == 2
    assert not isinstance(bag, collections.abc.Hashable)
    with pytest.raises(TypeError):
        hash(bag)
    with pytest.raises(TypeError):
        iter(plain)
    assert isinstance(table, collections.abc.Mapping) and dict(table) == {"a": 1}
    assert callable(solution.fn) and not isinstance(solution.fn, collections.abc.Sized)


def test_introspection_is_never_answered_by_the_solution():
    fn = solution.fn
    assert fn.__name__ == "fn" and fn.__qualname__ == "fn" and fn.__doc__ == "Adds."
    assert fn.__module__ == "solution"
    for name in ("__wrapped__", "__code__", "__defaults__",
                 "__globals__", "__self__", "__func__", "__annotations__", "__closure__"):
        assert not hasattr(fn, name), name
    for name in ("__wrapped__", "__code__"):
        assert not hasattr(type(fn), name), name
    assert type(fn).__text_signature__ is None  # the local class's own (type's) answer
    # It binds as a function does (its own `__get__`, here), which the tests' own code sees
    # and `inspect` does not: no routine to it, nor to pluggy.
    assert hasattr(fn, "__get__") and hasattr(type(fn), "__get__")
    assert not inspect.isroutine(fn) and not inspect.ismethoddescriptor(fn)
    # Its parameters as its code object says, told with its reference; plain defaults too.
    assert str(inspect.signature(fn)) == "(a, b=2)"
    assert type(fn).__signature__ is None  # (inspect of the mirror class answers as it did)


def test_a_standard_library_exception_is_itself():
    with pytest.raises(json.JSONDecodeError) as info:
        solution.parse("{bad")
    assert type(info.value) is json.JSONDecodeError
    assert (info.value.pos, info.value.lineno, info.value.colno) == (1, 1, 2)
    assert info.value.doc == "{bad"


def test_the_workspaces_subclass_of_a_standard_library_exception_is_one():
    with pytest.raises(json.JSONDecodeError) as info:
        solution.load_config("[1,")
    assert isinstance(info.value, solution.ConfigError) and info.value.pos == 3


def test_the_solutions_context_managers_see_the_tests_exceptions():
    log = []
    with pytest.raises(ZeroDivisionError):
        with solution.managed(log):
            1 / 0
    assert log == ["exit"]
    with solution.quiet():
        {}["missing"]


def test_the_tests_contextmanager_of_the_solutions_generator_sees_their_exceptions():
    # contextlib's `__exit__` throws the with-body's exception into the solution's generator
    # by `gen.throw(typ, value, traceback)` (3.11; `athrow` of an async one): the tests'
    # traceback crossed as an opaque handle, and the real `throw` refused it (TypeError in
    # place of the ValueError). So did the tests' own `throw(*sys.exc_info())`.
    log = []
    with pytest.raises(ValueError):
        with contextlib.contextmanager(solution.guarded)(log) as v:
            assert v == 5
            raise ValueError("x")
    assert log == ["enter", "caught", "exit"]

    async def body(log):
        async with contextlib.asynccontextmanager(solution.guarded_async)(log):
            raise ValueError("x")

    log = []
    with pytest.raises(ValueError):
        asyncio.run(body(log))
    assert log == ["enter", "caught", "exit"]
    for thrown in ("three", "one"):
        gen = solution.answering()
        assert next(gen) == 1
        try:
            raise KeyError("k")
        except KeyError as e:
            args = sys.exc_info() if thrown == "three" else (e,)
            assert gen.throw(*args) == "caught"
    log = []
    gen = solution.guarded(log)
    assert next(gen) == 5
    gen.close()
    assert log == ["enter", "exit"]


def test_a_solutions_exception_matches_an_anchored_pattern_and_has_no_notes():
    with pytest.raises(ValueError, match="^bad width: -1$") as caught:
        solution.checked_width(-1)
    assert not hasattr(caught.value, "__notes__")


def test_except_csv_error():
    try:
        solution.rows('"a"b')
    except csv.Error as e:
        assert "expected" in str(e)
    else:
        raise AssertionError("no csv.Error")


def test_called_process_error_keeps_its_attributes():
    with pytest.raises(subprocess.CalledProcessError) as info:
        solution.run(3)
    assert info.value.returncode == 3 and "sys.exit(3)" in info.value.cmd[-1]
    assert "returned non-zero exit status 3" in str(info.value)


def test_a_standard_library_named_tuple_is_itself():
    r = solution.split("https://example.org/path?q=1#top")
    assert isinstance(r, SplitResult) and type(r) is SplitResult
    assert r.scheme == "https" and r.netloc == "example.org" and r.hostname == "example.org"
    assert r == ("https", "example.org", "/path", "q=1", "top")
    assert r.geturl() == "https://example.org/path?q=1#top"


def test_a_frozen_dataclass_of_an_installed_package_is_itself():
    b = solution.bound(5)
    assert type(b) is annotated_types.Gt and b == annotated_types.Gt(5) and b.gt == 5


def test_a_mutable_standard_library_dataclass_is_itself_and_changes_come_back():
    row = solution.profile_row()
    assert type(row) is pstats.FunctionProfile and row.ncalls == "1" and row.line_number == 3
    assert solution.bump_row(row) is None and row.line_number == 4


def test_an_argparse_namespace_is_itself():
    args = solution.parse_args(["--verbose", "--n", "3"])
    assert isinstance(args, argparse.Namespace) and vars(args) == {"verbose": True, "n": 3}
    assert args == argparse.Namespace(verbose=True, n=3)


def test_namespaces_the_tests_pass_come_back_changed():
    ns = argparse.Namespace(n=1)
    solution.set_defaults(ns)
    assert vars(ns) == {"n": 2, "extra": "x"}
    simple = types.SimpleNamespace(n=5)
    solution.set_defaults(simple)
    assert simple == types.SimpleNamespace(n=6, extra="x")


def test_attributes_that_would_hide_methods_are_never_rebuilt():
    ns = solution.shadowing_namespace()
    assert not isinstance(ns, argparse.Namespace) and ns.n == 1
    with pytest.raises(json.JSONDecodeError) as info:
        solution.shadowing_error()
    assert "with_traceback" not in vars(info.value) and info.value.doc == "doc"


def test_the_solutions_dataclass_works_with_the_dataclasses_functions():
    item = solution.item("pen", 2)
    assert dataclasses.is_dataclass(item)
    assert [f.name for f in dataclasses.fields(item)] == ["name", "qty", "note"]
    assert dataclasses.asdict(item) == {"name": "pen", "qty": 2, "note": ""}
    assert dataclasses.astuple(item) == ("pen", 2, "")
    other = dataclasses.replace(item, qty=3)
    assert isinstance(other, solution.Item) and other == solution.Item("pen", 3)


@dataclasses.dataclass
class Config:
    path: str
    retries: int = 3


def test_a_dataclass_of_the_tests_works_in_the_solution():
    assert solution.as_dict(Config("/x")) == {"path": "/x", "retries": 3}


def test_what_stays_a_mirror_still_works():
    m = solution.match("a(b)", "ab")
    assert m.group(1) == "b" and m.span() == (0, 2)


def test_a_datetime_of_the_solutions_tzinfo_is_a_datetime():
    d = solution.stamp(120)
    assert type(d) is datetime.datetime and isinstance(d.tzinfo, datetime.tzinfo)
    assert d.utcoffset() == datetime.timedelta(hours=2) and d.tzname() == "X"
    assert d == datetime.datetime(2020, 1, 2, 1, 4, 5, tzinfo=datetime.timezone.utc)
    mine = datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=solution.Offset(120, "X"))
    assert mine == d and repr(mine.tzinfo).startswith("<solution.Offset")
    assert solution.offset_of(mine) == datetime.timedelta(hours=2)
    t = solution.clock()
    assert type(t) is datetime.time and t.utcoffset() == datetime.timedelta(hours=1)


def test_timezones_are_themselves():
    d, two, utc = solution.zones()
    assert d.tzinfo is datetime.timezone.utc and utc is datetime.timezone.utc
    assert repr(two) == repr(datetime.timezone(datetime.timedelta(hours=2)))
    west = datetime.timezone(datetime.timedelta(hours=-3), "W")
    assert solution.offset_of(datetime.datetime(2020, 1, 1, tzinfo=west)) == west.utcoffset(None)
    assert solution.name_of(west) == "W" and solution.name_of(two) == "UTC+02:00"


def test_slices_and_ellipsis_reach_the_solution_as_themselves():
    s = solution.seq(1, 2, 3, 4)
    assert s[1:3] == [2, 3] and s[::2] == [1, 3] and s[...] == (1, 2, 3, 4) and s[0] == 1


def test_the_tests_changes_to_a_modules_containers_reach_it():
    solution.WORDS.add("fish")
    assert solution.is_word("fish") and solution.is_word("sheep")
    solution.WORDS.discard("fish")
    assert not solution.is_word("fish")
    solution.RULES.append("b")
    assert solution.rules() == ["a", "b"]
    solution.TABLE["z"] = 2
    assert solution.table_keys() == ["k", "z"]
    del solution.TABLE["z"]
    assert solution.table_keys() == ["k"]
    assert type(solution.RULES) is list and type(solution.TABLE) is dict
    assert type(solution.WORDS) is set


def test_a_named_tuple_of_the_tests_is_a_named_tuple_in_the_solution():
    row = collections.namedtuple("Row", ["foo", "bar"])(1, 2)
    assert solution.fields_of(row) == (["foo", "bar"], {"foo": 1, "bar": 2}, True)
    assert solution.same(row) is row  # the tests' own again


def test_pytests_tmpdir_reaches_the_solution(tmpdir):
    tmpdir.join("in.txt").write("hi")
    assert solution.read_in(tmpdir) == "hi"
    assert tmpdir.join("out.txt").read() == "HI"


def test_a_modules_namespace_holds_the_real_modules_names():
    # pytest 9's monkeypatch.setattr saves what the module's __dict__ has and restores it
    saved = vars(solution).get("fn", "absent")
    assert callable(saved) and "fn" in vars(solution)
    solution.fn = solution.offset_of
    setattr(solution, "fn", saved)
    assert solution.fn(1) == 3


def test_a_modules_doctests_run_in_its_own_process(capsys):
    import doctest

    import counted
    import wrong_doc

    assert doctest.testmod(counted) == (0, 2)
    found = doctest.testmod(wrong_doc, optionflags=doctest.ELLIPSIS)
    assert isinstance(found, doctest.TestResults) and found == (1, 1)
    assert "Failed example" in capsys.readouterr().out
    assert vars(counted).copy()["CALLS"] == counted.CALLS


def test_a_reload_runs_the_module_again_there():
    import importlib

    import counted

    counted.bump()
    assert importlib.reload(counted) is counted and counted.CALLS == []
    assert counted.bump() == 1 and "def bump" in inspect.getsource(counted)


def test_a_runners_object_is_a_handle_there_and_its_plain_answers_are_data(capsys):
    p = pytest.param(1, [2], id="x")
    assert solution.peek(p) == ("refused", "PermissionError") and solution.same(p) is p
    print("hi")
    assert solution.peek(capsys.readouterr()) == ("read", 2, "hi\\n")


def test_a_runners_enum_member_is_its_value_there():
    code = pytest.ExitCode.TESTS_FAILED
    assert solution.exit_code(code) == (True, 1, "TESTS_FAILED", True, "failed", "1")
    assert solution.same(code) is code
    assert solution.tag(code) == "refused" and not hasattr(code, "note")  # the runner's own


def test_a_package_run_by_its_path_runs_as_python_would():
    # tabulate's tests run `python tabulate/__init__.py` in /app
    out = subprocess.run([sys.executable, "tool/__init__.py", "x"], capture_output=True, text=True)
    assert out.stdout == "tool ['x'] True\\n", out.stderr


def test_warnings_reach_pytest_warns():
    with pytest.warns(DeprecationWarning, match="old api"):
        assert solution.warns(1) == 1
    with pytest.warns(solution.OwnWarning):
        solution.warns(1, solution.OwnWarning)


def test_a_warning_in_a_loop_is_recorded_each_time_and_asked_once_when_shown_once():
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        solution.warns(3)
    assert len(seen) == 3 and all(w.category is DeprecationWarning for w in seen)
    ep = sys.modules["_rollouts_trusted"].endpoint()
    ops = []
    send = ep.send
    ep.send = lambda msg: (ops.append(msg.get("op")), send(msg))[1]
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")
            solution.warns(500)
    finally:
        del ep.send
    assert len(seen) == 1 and len(ops) < 10, (len(seen), ops)


def test_an_error_filter_raises_at_the_warn_call_in_the_solution():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert solution.caught_warning() == "caught old api"
        with pytest.raises(DeprecationWarning):
            solution.warns(1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", module="solution")
        assert solution.caught_warning() == "caught old api"


def test_the_solutions_subclass_of_str_is_a_str_whose_own_methods_run_there():
    w, bob = solution.words()
    assert isinstance(w, str) and isinstance(w, solution.Word) and type(w) is solution.Word
    assert w == "ada" and "ada" == w and w != "bob" and hash(w) == hash("ada")
    assert {"ada": 1}[w] == 1 and {w: 1}["ada"] == 1 and sorted([bob, w]) == ["ada", "bob"]
    assert json.dumps({w: [w]}) == '{"ada": ["ada"]}' and f"<{w}>" == "<ada>"
    assert w.split("d") == ["a", "a"] and w + "!" == "ada!" and w.startswith("a")
    assert w.upper() == "UP:ADA"  # the solution's method over str's
    assert w.shout() == "UP:ADA!" + str(solution.pid()) and w.lang == "en"


def test_the_solutions_subclasses_of_int_dict_and_list_are_those():
    n = solution.counted(6)
    assert isinstance(n, int) and n == 6 and n + 1 == 7 and list(range(n))[-1] == 5
    assert str(n) == "count 6" and json.dumps(n) == "6" and "%d" % n == "6"
    d = solution.defaults()
    assert isinstance(d, dict) and d == {"a": 1} and json.dumps(d) == '{"a": 1}'
    assert d["a"] == 1 and d["b"] == "missing b" and dict(d) == {"a": 1}
    s = solution.stack()
    assert isinstance(s, list) and s == [1, 2, 3] and s[1:] == [2, 3] and s.top() == 3
    s.append(4)
    s += [5]
    s[0] = 0
    assert s == [0, 2, 3, 4, 5] and s.top() == 5 and solution.same(s) is s
    assert s.pop() == 5 and s.top() == 4
    d["b"] = 2
    assert solution.as_dict_of(d) == {"a": 1, "b": 2}


def test_the_solutions_enum_members_are_enum_members():
    import enum

    assert isinstance(solution.Size.L, enum.IntEnum) and isinstance(solution.Size.L, int)
    assert solution.Size.L == 3 and solution.Size(3) is solution.Size.L and solution.Size.S < 2
    assert solution.Size.L.name == "L" and solution.Size.L.value == 3
    assert list(solution.Size) == [solution.Size.S, solution.Size.L]
    assert list(solution.Size.__members__) == ["S", "L"] and json.dumps(solution.Size.L) == "3"
    dark = solution.Shade.DARK
    assert isinstance(dark, enum.Enum) and isinstance(dark, str) and dark == "dark"
    assert solution.Shade("light") is solution.Shade.LIGHT and {dark: 1}["dark"] == 1
    rw = solution.Perm.R | solution.Perm.W
    assert isinstance(rw, enum.IntFlag) and rw == 6 and solution.Perm.R in rw


def test_the_solutions_named_tuples_are_tuples():
    m = solution.minmax([3, 1, 2])
    assert isinstance(m, tuple) and m == (1, 3) and m.lo == 1 and m.hi == 3 and m[1] == 3
    lo, hi = m
    assert (lo, hi) == (1, 3) and m._fields == ("lo", "hi") and m._asdict() == {"lo": 1, "hi": 3}
    assert json.dumps(m) == "[1, 3]" and m._replace(hi=5) == (1, 5)
    s = solution.span(2, 7)
    assert isinstance(s, tuple) and s == (2, 7) and s.end == 7 and s.length() == 5


class Tag(str):
    pass


def test_the_tests_subclasses_of_builtins_are_those_in_the_solution():
    import enum

    class Mode(enum.IntEnum):
        ON = 1

    assert solution.kinds_of(Tag("x"), Mode.ON) == [
        ("Tag", True, False, "x"), ("Mode", False, True, "1"),
    ]


def test_a_list_the_solution_keeps_is_the_tests_list_in_later_calls():
    seen = []
    logger = solution.Logger(seen)
    logger.log("a")
    logger.log("b")
    assert seen == ["a", "b"]
    seen.append("c")  # the tests' change reaches the solution's kept list too
    logger.log("d")
    assert seen == ["a", "b", "c", "d"]
    assert logger.sink_is(seen) is True  # handed again, it is the same object there
    assert logger.sink is seen  # and back here


def test_a_dict_the_solution_keeps_sees_the_tests_changes_and_its_own_nesting():
    config = {"x": 1}
    settings = solution.Settings(config)
    config["x"] = 2
    assert settings.get("x") == 2
    settings.add_group("g")
    group = config["g"]
    settings.add_to("g", 1)
    assert group == [1] and config == {"x": 2, "g": [1]}
    group.append(2)
    settings.add_to("g", 3)
    assert config["g"] is group and group == [1, 2, 3]


def test_a_generator_reads_the_tests_state_as_it_goes():
    state = {"k": 1}
    gen = solution.scaled(3, state)
    assert next(gen) == 0
    state["k"] = 10
    assert list(gen) == [10, 20]


def _two():
    yield 1
    yield 2


class Box:
    def __init__(self, v):
        self.v = v


def test_the_solutions_tee_of_the_tests_iterators_buffers_them_as_it_would_here():
    # itertools.tee copies an iterator that has __copy__ (a tee) and buffers any other
    assert solution.tee_both(_two()) == ([1, 2], [1, 2])
    assert solution.tee_both(map(str, [1, 2])) == (["1", "2"], ["1", "2"])
    assert solution.tee_both(iter([1, 2])) == ([1, 2], [1, 2])
    assert solution.tee_both(itertools.tee([3])[0]) == ([3], [3])
    for x in (_two(), iter([1]), map(str, []), itertools.tee([1])[0], Box(1)):
        assert solution.has_copy(x) is hasattr(x, "__copy__"), x


def test_the_tests_tee_of_the_solutions_generator_buffers_it():
    a, b = itertools.tee(solution.scaled(3, {"k": 2}))
    assert list(a) == [0, 2, 4] and list(b) == [0, 2, 4]
    assert not hasattr(solution.scaled(1, {"k": 1}), "__copy__")


def _walk(it, visit):
    return [(x, visit(x)) for x in it]


def _calling_back(walker, items, wrap=iter):
    # The solution's walk (or the same here) of an iterator of ours, whose callback moves it
    # and changes what it walks: items read ahead and set aside across the callbacks must be
    # what one process would give.
    it = wrap(items)

    def visit(x):
        if x == 10:
            return next(it)
        if x == 20 and isinstance(items, list):
            items[22 if wrap is iter else 18] = "changed"
        if x == 30 and isinstance(items, list):
            del items[31:33]
        if x == 40 and isinstance(items, list):
            items.append(1000)
        if isinstance(x, list) and x[0] < len(items):
            items[x[0]].append(0)  # the next item, read ahead, changes in place
        return None

    return walker(it, visit)


def test_the_solution_walks_an_iterator_of_ours_that_our_callbacks_move_and_change():
    for make in (lambda: list(range(41)), lambda: tuple(range(60)), lambda: "x" * 40):
        assert _calling_back(solution.walk, make()) == _calling_back(_walk, make())
    assert _calling_back(solution.walk, list(range(60)), reversed) == _calling_back(
        _walk, list(range(60)), reversed
    )
    for make in (lambda: range(50), lambda: [[1], [2], [3], [4]]):
        assert _calling_back(solution.walk, make()) == _calling_back(_walk, make())


def test_a_reversed_iterator_past_the_end_of_a_list_that_shrank_gives_nothing():
    for make in (list, bytearray):
        items = make(range(10))
        it = reversed(items)
        next(it)
        del items[3:]
        assert solution.walk(it, lambda x: None) == []
    items = list(range(10))

    def visit(x):
        if x == 8:
            del items[3:]

    assert solution.walk(reversed(items), visit) == [(9, None), (8, None)]


def test_items_of_a_list_both_sides_keep_are_never_read_ahead_stale():
    kept = list(range(10))
    it = solution.iterate(kept)  # (the solution keeps our list: one list on both sides)
    assert next(it) == 0
    kept[1] = "x"
    assert next(it) == "x"
    items = solution.Keeper().get()
    assert solution.walk_changing(iter(items), items)[2] == "changed"


def test_our_list_handed_over_beside_our_iterator_over_it_is_one_list():
    # (it crossed as a copy: the solution's change reached our list, and our iterator, only
    # with the answer. The case above passed only because the `Keeper` that handed its list
    # out was never released, so that list stayed one on both sides)
    items = list(range(10))
    assert solution.walk_changing(iter(items), items)[2] == "changed" and items[2] == "changed"


def test_we_walk_the_solutions_iterator_while_its_methods_change_it():
    box = solution.Items(list(range(10)))
    assert [box.touch(x) for x in box] == [0, 1, 2, 3, 4, "changed", 6, 7, 8, 9, "more"]


def test_copy_copy_of_the_other_sides_objects_copies_them_there():
    box = Box([1])
    other = solution.copied(box)
    assert type(other) is Box and other is not box and other.v is box.v
    made = copy.copy(solution.Plain())
    assert type(made) is solution.Plain


def test_a_list_the_solution_does_not_keep_is_not_shared():
    ep = sys.modules["_rollouts_trusted"]._endpoint
    items = [1, 2]
    assert solution.first_of(items) == 1
    assert id(items) not in ep.share_ids
    kept = []
    solution.Logger(kept)
    assert id(kept) in ep.share_ids
    huge = list(range(20000))  # past the budget of items checked at every exchange
    solution.Logger(huge)
    assert id(huge) not in ep.share_ids


def test_a_solution_object_survives_a_pickle_round_trip():
    import pickle

    point = solution.Coord(1, 2)
    assert pickle.loads(pickle.dumps(point)) == point
    assert pickle.loads(pickle.dumps([point], protocol=0)) == [point]
    assert pickle.loads(pickle.dumps(solution.Keyed("k"))) == solution.Keyed("k")


def test_runner_outcome_skip_from_the_solution():
    solution.skip()


def test_runner_outcome_unittest_skip_from_the_solution():
    solution.unittest_skip()


def test_runner_outcome_exit_from_the_solution():
    solution.exit()
"""


# Workspace modules with doctests: a reload's and doctest's (reruns.py).
COUNTED = '''"""Counts its calls.

>>> bump() > 0
True
"""

CALLS = []


def bump():
    """The number of calls so far.

    >>> isinstance(bump(), int)
    True
    """
    CALLS.append(1)
    return len(CALLS)
'''
WRONG_DOC = '''
def half(n):
    """
    >>> half(4)
    2
    """
    return n // 3
'''


# A package whose __init__ is also a program (tabulate's): run by its path, it has no
# `__main__` module to run, only that file.
TOOL = """import sys

if __name__ == "__main__":
    print("tool", sys.argv[1:], __file__.endswith("tool/__init__.py"))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    layout = Layout(Path(tmp_path_factory.mktemp("fidelity")) / "verifier")
    layout.files("workspace", {"solution.py": SOLUTION, "tool/__init__.py": TOOL})
    layout.files("workspace", {"counted.py": COUNTED, "wrong_doc.py": WRONG_DOC})
    layout.files("tests", {"test_shapes.py": TESTS})
    layout.view()
    return layout.pytest("-rA")


def _outcome(run: Run, case: str) -> str:
    found = re.search(
        rf"^(PASSED|FAILED|SKIPPED|XFAIL|ERROR) \S*test_shapes\.py::{case}\b", run.output, re.M
    )
    return found.group(1) if found else "absent"


@pytest.mark.parametrize("case", re.findall(r"^def (test_\w+)", TESTS, re.M))
def test_task_shapes_score_as_under_plain_pytest(run: Run, case: str) -> None:
    """Every shape passes as it would in one process; a runner's outcome exceptions raised by
    the solution (skip, unittest's skip, exit) fail their test instead."""
    expected = "FAILED" if case.startswith("test_runner_outcome") else "PASSED"
    assert _outcome(run, case) == expected, run.output[-4000:]


def test_what_the_boundary_cannot_reproduce_is_reported(run: Run) -> None:
    """A standard library object that is neither an exception nor a record (`re.Match`), or a
    record that could not be rebuilt (a namespace whose attribute would hide a method), stays a
    mirror: the guard's report says so, once per class, for calibration; what was rebuilt is
    not reported."""
    gaps = [(e["module"], e["qualname"]) for e in run.named("fidelity_gap")]
    assert gaps.count(("re", "Match")) == 1 and ("argparse", "Namespace") in gaps, gaps
    rebuilt = {"SplitResult", "JSONDecodeError", "Error", "CalledProcessError", "Gt"}
    rebuilt |= {"FunctionProfile", "SimpleNamespace", "datetime", "time", "timezone", "tzinfo"}
    rebuilt |= {"LocalPath", "slice"}
    assert not rebuilt & {qualname for _module, qualname in gaps}, gaps


def test_a_record_class_with_loose_comparisons_is_never_rebuilt() -> None:
    """A rebuilt record is compared by its own class's methods, not the trusted side's probes:
    the other side must not pick an importable class whose equality is loose."""
    import dataclasses
    import importlib.util
    import sys
    import urllib.parse

    loader = sys.modules.get("_rollouts_loader")
    if loader is None:  # (the runtime's modules find each other through it)
        spec = importlib.util.spec_from_file_location("_rollouts_loader", RUNTIME / "loader.py")
        loader = importlib.util.module_from_spec(spec)
        sys.modules["_rollouts_loader"] = loader
        spec.loader.exec_module(loader)
    rpc = loader.load("rpc")

    @dataclasses.dataclass(frozen=True)
    class Honest:
        a: int

    class Loose(Honest):
        def __eq__(self, other):
            return True

        __hash__ = Honest.__hash__

    class LooseTuple(urllib.parse.SplitResult):
        __slots__ = ()

        def __contains__(self, item):
            return True

    assert rpc._record_kind(Honest) == ("D", ["a"])
    assert rpc._record_kind(urllib.parse.SplitResult)[0] == "N"
    assert rpc._record_kind(Loose) is None and rpc._record_kind(LooseTuple) is None


ECHO = '''
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __repr__(self):
        return "Point(%r, %r)" % (self.x, self.y)


class Echo:
    """Its repr is whatever text it was given: the attacks' way to have the tests run text."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text
'''
ECHO_TESTS = """
import pytest

import solution
from solution import Echo, Point


def test_a_repr_that_builds_through_the_solution_round_trips():
    p = Point(1, -2)
    assert eval(repr(p)) == p
    assert eval(repr([p, (p, {"k": frozenset({3})})])) == [p, (p, {"k": frozenset({3})})]
    made = eval(repr(Echo("Point(x=int('4'), y=solution.Point(0, 0))")))
    assert made == Point(4, Point(0, 0))


@pytest.mark.parametrize(
    "text",
    [
        "__import__('sys').modules['solution']",  # a builtin that is no data constructor
        "exec('expected = 1')",
        "Point.__init__",  # underscore attributes reach the tests' objects' internals
        "expected",  # a name of the tests, not of the tested process
        "Point(*expected)",
        "[Point(0, 0) for _ in ()]",  # statements' and comprehensions' nodes
        "(lambda: 1)()",
        "str(1).join([]).format",  # attributes of what the tests' process made
        "Point(0, 0).x",  # (or of a call's result: kept simple)
        "nowhere(1)",  # a name evaluated in a namespace the tests made: not judged here
    ],
)
def test_text_that_would_run_the_tests_objects_is_refused(text):
    expected = [1, 2]
    with pytest.raises(RuntimeError, match="not run in the tests' process"):
        eval(repr(Echo(text)))
    assert expected == [1, 2]
"""


def test_a_repr_evaluated_by_the_tests_runs_only_through_the_tested_process(
    tmp_path: Path,
) -> None:
    """`eval(repr(p)) == p` (a `__repr__` task's round trip) evaluates the tested code's text:
    allowed when it only builds values through the tested process (its classes, constants,
    containers, data constructors), refused when it would reach anything of the tests'."""
    layout = Layout(tmp_path / "verifier")
    layout.files("workspace", {"solution.py": ECHO})
    layout.files("tests", {"test_echo.py": ECHO_TESTS})
    layout.view()
    run = layout.pytest("-rA")
    assert run.rc == 0, run.output[-4000:]
    assert run.output.count("PASSED") == 11, run.output[-4000:]


def test_shares_are_only_what_the_tests_handed_over_and_only_as_themselves() -> None:
    """What the other side may say of shares (shares.py), as the trusted side hears it: a
    container of a call's arguments kept there is updated in place; a handle never shared, a
    share of a probe's operand (the tests' expected value), a share of its own numbering or of
    a tuple, or an update that changes a share's type is a protocol error."""
    import importlib.util
    import socket
    import sys

    loader = sys.modules.get("_rollouts_loader")
    if loader is None:  # (the runtime's modules find each other through it)
        spec = importlib.util.spec_from_file_location("_rollouts_loader", RUNTIME / "loader.py")
        loader = importlib.util.module_from_spec(spec)
        sys.modules["_rollouts_loader"] = loader
        spec.loader.exec_module(loader)
    rpc = loader.load("rpc")
    codec = loader.load("codec")
    a, b = socket.socketpair()
    ep = rpc.Endpoint(a)
    ep.share_sign = -1  # as the trusted side numbers its own

    def sent(op, *values):
        memo = codec.Memo(records=ep)
        memo.op = op
        for v in values:
            ep.encode(v, memo)
        return memo

    seen, pair = [], (1, 2)
    call = sent("call", seen, pair)
    ep._built({"r": 1, "t": [], "sr": [[1, 1]]}, call)
    assert ep.shares == {1: seen}
    synced = {"r": 2, "t": [["l", []]], "sy": [[1, ["l", ["a", ["@", 1]]]]], "sk": [[1, 2]]}
    ep._built(synced, None)
    assert seen == ["a", []] and ep.shares[2] is seen[1]
    forged = [
        ({"r": 3, "t": [], "sy": [[7, ["l", []]]]}, None),  # never shared
        ({"r": 4, "t": [], "sy": [[1, ["d", []]]]}, None),  # a list made a dict
        ({"r": 5, "t": [], "sr": [[1, 3]]}, sent("probe", [3, 1, 2])),  # a probe's operand
        ({"r": 6, "t": [], "sr": [[2, 3]]}, call),  # the tuple
        ({"r": 7, "t": [["l", []]], "sk": [[1, -5]]}, None),  # our own numbering
    ]
    for msg, request in forged:
        with pytest.raises(codec.ProtocolError):
            ep._built(msg, request)
    a.close()
    b.close()


DESCRIPTOR_SOLUTION = """
import os
import subprocess
import sys


def report(name):
    print("python " + name)
    sys.stdout.flush()
    os.write(1, b"raw " + name.encode() + b"\\n")
    subprocess.run(["echo", "child " + name], check=True)
    subprocess.run(["sh", "-c", "echo oops " + name + " >&2"], check=True)
    return name
"""
DESCRIPTOR_TESTS = """
from solution import report


def test_capfd_sees_every_write_in_order(capfd):
    assert report("a") == "a"
    out, err = capfd.readouterr()
    assert out == "python a\\nraw a\\nchild a\\n"
    assert err == "oops a\\n"


def test_capsys_sees_the_python_writes_alone(capsys):
    report("b")
    out, err = capsys.readouterr()
    assert out == "python b\\n"
    assert err == ""
"""


def test_writes_to_descriptors_reach_the_tests_descriptors(tmp_path: Path) -> None:
    """What the solution's programs (or `os.write`) write to fds 1 and 2 reaches the tests'
    fds 1 and 2 before the call returns, after what it printed before: `capfd` sees it, as in
    one process, and `capsys`, which sees only Python's streams, does not."""
    run = _graded(tmp_path, DESCRIPTOR_SOLUTION, "test_output.py", DESCRIPTOR_TESTS)
    assert run.rc == 0, run.output


KEPT_SOLUTION = """
_REGISTRY = []
_CONFIG = {"debug": False}
_CACHE = {}


def registry():
    return _REGISTRY


def register(name):
    _REGISTRY.append(name)


def config():
    return _CONFIG


def is_debug():
    return _CONFIG["debug"]


def fresh():
    return [1, 2]


def lookup(key):
    return _CACHE.setdefault(key, [])


class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)

    def peek(self):
        return self.items[-1]

    def everything(self):
        return self.items
"""
KEPT_TESTS = """
import solution


def test_the_same_registry_each_time_and_both_sides_change_it():
    r = solution.registry()
    assert r is solution.registry()
    solution.register("a")
    assert r == ["a"]
    r.append("b")
    assert solution.registry() is r
    assert len(solution.registry()) == 2


def test_a_config_the_tests_change_is_the_modules():
    cfg = solution.config()
    cfg["debug"] = True
    assert solution.is_debug()


def test_an_objects_own_list():
    s = solution.Stack()
    s.items.append(3)
    assert s.peek() == 3
    s.push(4)
    assert s.everything() is s.items
    assert s.items == [3, 4]


def test_a_cached_answer_and_a_fresh_one():
    assert solution.lookup("k") is solution.lookup("k")
    solution.lookup("k").append(1)
    assert solution.lookup("k") == [1]
    a, b = solution.fresh(), solution.fresh()
    assert a == b and a is not b
    a.append(3)
    assert solution.fresh() == [1, 2]
"""


def test_a_container_the_solution_answers_and_keeps_is_one_object_on_both_sides(
    tmp_path: Path,
) -> None:
    """A list or dict that a call or an attribute answers and the solution's code still holds
    (a registry, a config, an object's own list, a cache) is shared (shares.py
    `kept_answer`): the same object each time, and either side's changes reach the other, as
    in one process; a fresh answer is a fresh copy."""
    run = _graded(tmp_path, KEPT_SOLUTION, "test_kept.py", KEPT_TESTS)
    assert run.rc == 0, run.output


DECORATOR_SOLUTION = """
import functools


def logged(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)

    return wrapper
"""

DECORATOR_TESTS = """
import solution


def test_a_decorated_function_keeps_its_names():
    @solution.logged
    def double(x):
        '''Twice x.'''
        return 2 * x

    assert double(4) == 8
    assert double.__name__ == "double" and double.__doc__ == "Twice x."
    assert "test_a_decorated" not in double.__qualname__  # (the test's name stays the tests')
    assert double.__module__ == "test_decorator"
"""


def test_the_solutions_decorator_keeps_the_tests_functions_names(tmp_path: Path) -> None:
    """A solution's decorator (`functools.wraps`) applied to a function of the tests: the
    wrapper has that function's `__name__`, `__module__` and `__doc__`, as in one process (a
    tests' routine goes with them by value: `tells_routine_names`; not its `__qualname__`,
    which names the test that made it). It had its own (`wrapper`): a correct decorator
    failed."""
    run = _graded(tmp_path, DECORATOR_SOLUTION, "test_decorator.py", DECORATOR_TESTS)
    assert run.rc == 0, run.output


PATCHED_SOLUTION = """
import datetime
import json
import os
import subprocess
import sys
import time


def read_config(path):
    with open(path) as f:
        return f.read().strip().split(",")


def present(path):
    return os.path.exists(path)


def stamp():
    return time.time()


def retry(f, n=3):
    for _ in range(n):
        try:
            return f()
        except ValueError:
            time.sleep(10)
    raise RuntimeError("gave up")


def ask():
    return input("name? ").strip().upper()


def words():
    return sys.stdin.read().split()


def parse(text):
    return json.loads(text)


def pid():
    return os.getpid()


def env():
    return dict(os.environ)


def prompt():
    return os.path.basename(os.getcwd()) + "$ "


def status():
    return subprocess.run(["git", "status"], capture_output=True, text=True).stdout


def call_with(f, x):
    return f(x)


def now():
    import datetime

    return datetime.datetime.now()


def header(n):
    import struct

    return struct.pack(">I", n)


def say(text):
    sys.stdout.write(text + "\\n")


def tomorrow():
    return datetime.date.today() + datetime.timedelta(days=1)
"""

PATCHED_TESTS = """
import io
import os
import subprocess
import time
from unittest import mock

import solution


def test_mock_open():
    with mock.patch("builtins.open", mock.mock_open(read_data="a,b\\n")) as opened:
        assert solution.read_config("cfg.txt") == ["a", "b"]
    opened.assert_called_once_with("cfg.txt")


@mock.patch("os.path.exists", return_value=True)
def test_a_decorator_patch(exists):
    assert solution.present("/no/such/file")
    exists.assert_called_once_with("/no/such/file")


def test_and_after_it_the_real_one():
    assert not solution.present("/no/such/file")


def test_a_patch_through_the_solutions_module():
    attempts = iter([ValueError, ValueError, 7])

    def flaky():
        v = next(attempts)
        if v is ValueError:
            raise v
        return v

    with mock.patch("solution.time.sleep") as sleep:  # the tests' own time module
        assert solution.retry(flaky) == 7
    assert sleep.call_count == 2


def test_nested_patches_of_one_name():
    with mock.patch.object(time, "time", return_value=1.0):
        with mock.patch("time.time", return_value=2.0):
            assert solution.stamp() == 2.0
        assert solution.stamp() == 1.0
    assert solution.stamp() > 1e9


def test_input_and_stdin(monkeypatch):
    with mock.patch("builtins.input", return_value=" bob "):
        assert solution.ask() == "BOB"
    monkeypatch.setattr("sys.stdin", io.StringIO("a b c"))
    assert solution.words() == ["a", "b", "c"]


def test_a_standard_library_function_patched():
    with mock.patch("json.loads", return_value={"k": 1}):
        assert solution.parse("not json") == {"k": 1}
    assert solution.parse("[1]") == [1]


def test_a_patched_environment_object(monkeypatch):
    monkeypatch.setattr(os, "environ", {"ONLY": "1"})  # (carried.py sends what it holds)
    assert solution.env() == {"ONLY": "1"}
    monkeypatch.undo()
    assert solution.env()["PATH"] == os.environ["PATH"]


def test_a_completed_process_as_a_return_value():
    done = subprocess.CompletedProcess(["git"], 0, stdout="clean")
    with mock.patch("subprocess.run", return_value=done):
        assert solution.status() == "clean"


def test_a_pure_builtin_as_a_side_effect():
    assert solution.call_with(mock.Mock(side_effect=len), "abc") == 3


def test_datetime_and_struct_patched_as_the_runtime_uses_them():
    import datetime

    real = datetime.datetime
    with mock.patch("datetime.datetime") as dt:
        dt.now.return_value = real(2020, 1, 2, 3, 4, 5)
        assert solution.now() == real(2020, 1, 2, 3, 4, 5)
    with mock.patch("struct.pack", return_value=b"\\x00\\x00\\x00\\x07"):
        assert solution.header(9) == b"\\x00\\x00\\x00\\x07"


def test_a_patched_stdout():
    with mock.patch("sys.stdout", io.StringIO()) as out:
        solution.say("hey")
    assert out.getvalue() == "hey\\n"


def test_and_the_next_tests_capture(capsys):
    solution.say("again")  # (pytest's capture since: the tested process's own writer again)
    assert capsys.readouterr().out == "again\\n"


def test_a_real_class_set_on_a_mock():
    import datetime

    real = datetime.date
    with mock.patch("solution.datetime") as dt:  # (the solution's own name: a freeze)
        dt.date.today.return_value = real(2020, 1, 2)
        dt.timedelta = datetime.timedelta  # given, by its name: the tested process's own
        assert solution.tomorrow() == real(2020, 1, 3)


def test_the_runtime_does_not_ask_a_patched_getcwd():
    with mock.patch("os.getcwd", return_value="/home/alice/project") as getcwd:
        assert solution.prompt() == "project$ "
    getcwd.assert_called_once()


def test_the_runtime_does_not_take_a_patched_getpid_for_its_own():
    with mock.patch("os.getpid", return_value=42):
        assert solution.pid() == 42
    assert solution.pid() != 42
"""


def test_the_tests_patches_of_shared_modules_reach_the_solution(tmp_path: Path) -> None:
    """`mock.patch` and `monkeypatch.setattr` of the standard library, builtins or an installed
    package (`builtins.open` with `mock_open`, `os.path.exists`, `time.sleep` through the
    solution's module, `builtins.input`, `sys.stdin`) are made in the tested process too, before
    the next call, and undone there when the tests undo theirs (patches.py); the runtime's own
    `os.getpid` is bound before any patch. Each of these failed: the solution ran the real one."""
    run = _graded(tmp_path, PATCHED_SOLUTION, "test_patched.py", PATCHED_TESTS)
    assert run.rc == 0, run.output
    assert "16 passed" in run.output


SPIED_TESTS = """
import os
from unittest import mock

import solution


def test_a_spy_stays_the_tests():
    with mock.patch("os.path.exists", wraps=os.path.exists) as spy:
        assert solution.present("/etc") is True  # its own os.path.exists, not the spy
    assert spy.call_count == 0
"""


LATE_MOCK_TESTS = """
import solution
from unittest.mock import patch


@patch("time.time", return_value=7.0)
def test_first(stamp):
    assert solution.stamp() == 7.0
"""


def test_a_patch_of_a_mock_imported_after_the_solution_is_made_there(tmp_path: Path) -> None:
    """A test module that imports the solution before `unittest.mock`, and patches before its
    next call: the patchers are hooked as `unittest.mock` is made (patches.py, by loader.py
    `after_import`), not at the next request, which came after the patch."""
    run = _graded(tmp_path, PATCHED_SOLUTION, "test_late_mock.py", LATE_MOCK_TESTS)
    assert run.rc == 0, run.output


def test_a_spy_on_a_real_function_is_never_made_in_the_tested_process(tmp_path: Path) -> None:
    """A mock that wraps a real function (`wraps=os.path.exists`) is not made in the tested
    process (patches.py `_replayable`): its calls would run the tests' real function, with the
    tests' rights, on the tested code's arguments (a file of /tests read for it). The solution
    keeps its own function; the spy records nothing of it (such a test fails: the fallback)."""
    run = _graded(tmp_path, PATCHED_SOLUTION, "test_spied.py", SPIED_TESTS)
    assert run.rc == 0, run.output


# ---- what the solution does with the tests' objects, as it would in one process ------------
# Each shape failed a correct solution before (a hunt for common idioms, stop 50): the change
# lost, a PermissionError, a mirror type, an exception not caught as itself, a
# `(*args, **kwargs)` signature, an `await` refused.
HANDED_SOLUTION = """
import asyncio
import contextlib
import dataclasses
import functools
import gc
import inspect
import pickle
import random


def in_context(generator_function, log):
    try:
        with contextlib.contextmanager(generator_function)(log):
            raise KeyError("k")
    except KeyError:
        return "raised on"


def add_item(o, x):
    o.items.append(x)


def grown(o):
    return type(o)(o.a + 1), o.__class__(o.a + 2), type(o).make(5)


def replaced(d):
    return dataclasses.replace(d, a=9)


def set_value(o, v):
    o.value = v


def set_slot(o, v):
    o.s = v


def moved(p):
    return p._replace(x=10)


def call(cb):
    return cb()


def wrap_key_error(cb):
    try:
        cb()
    except KeyError as e:
        raise ValueError("wrapped") from e


def arity(cb):
    return [p.name for p in inspect.signature(cb).parameters.values()]


async def dispatch(cb, x):
    if asyncio.iscoroutinefunction(cb):
        return await cb(x)
    return cb(x)


def run(cb, x):
    return asyncio.run(dispatch(cb, x))


def total(agen):
    async def go():
        return sum([x async for x in agen])

    return asyncio.run(go())


async def numbers(n):
    for i in range(n):
        yield i



class Plugin:
    name = "plugin"


def register(plugin):
    if not isinstance(plugin, Plugin):
        raise TypeError("not a plugin")
    return plugin.name


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return ("logged", fn(*args, **kwargs))

    return wrapper


def cachedmethod(cache):
    def decorator(method):
        def wrapper(self, *args):
            held = cache(self)
            if args not in held:
                held[args] = method(self, *args)
            return held[args]

        return wrapper

    return decorator


def weakly_cached(cache, key, make):
    gc.disable()  # (no collection between: nothing but reference counts frees what it made)
    try:
        try:
            return cache[key]
        except KeyError:
            pass
        value = cache[key] = make()
        return value
    finally:
        gc.enable()


class Chooser:
    def __init__(self, choice=random.choice):
        self.choice = choice


def pickled_chooser():
    return pickle.loads(pickle.dumps(Chooser())).choice([7])


def popped(d):
    try:
        return d.popitem()
    except KeyError:
        raise KeyError("empty") from None


def loads(text, _dict=dict):
    out = _dict()
    for line in text.splitlines():
        key, value = line.split("=")
        out[key] = value
    return out


def changed(d, xs, s):
    d["b"] = 2
    del d["a"]
    d |= {"c": 3}
    xs[0] = 9
    xs += [4]
    del xs[1]
    s |= {5}
    s -= {1}


class Version:
    __slots__ = ("_parts",)

    def __init__(self, major, minor, pre=None):
        self._parts = (major, minor, pre)

    major = property(lambda self: self._parts[0])
    minor = property(lambda self: self._parts[1])
    pre = property(lambda self: self._parts[2])

    def __iter__(self):
        return iter(self._parts)

    def __eq__(self, other):
        if isinstance(other, dict):
            other = Version(**other)
        return isinstance(other, Version) and self._parts == other._parts

    __hash__ = None


def version(text):
    major, minor = text.split(".")
    return Version(int(major), int(minor))
"""
HANDED_TESTS = """
import asyncio
import collections
import dataclasses
import fractions
import gc
import weakref
from unittest import mock

import pytest

import solution


class Box:
    def __init__(self, a=0):
        self.a = a
        self.items = []

    @classmethod
    def make(cls, a):
        return cls(a)


def test_a_list_in_an_attribute_of_ours_is_changed_in_place():
    box = Box()
    solution.add_item(box, 3)
    solution.add_item(box, 4)
    assert box.items == [3, 4]


def test_our_objects_class_makes_our_objects():
    a, b, c = solution.grown(Box(1))
    assert (type(a), a.a, type(b), b.a, type(c), c.a) == (Box, 2, Box, 3, Box, 5)


@dataclasses.dataclass
class Point:
    a: int
    b: int = 0


def test_dataclasses_replace_of_our_dataclass_is_ours():
    assert solution.replaced(Point(1, 2)) == Point(9, 2)


class Temperature:
    def __init__(self):
        self._v = 0

    @property
    def value(self):
        return self._v

    @value.setter
    def value(self, v):
        self._v = v * 2


class Slotted:
    __slots__ = ("s",)


def test_a_property_setter_and_a_slot_of_ours_are_set():
    t, s = Temperature(), Slotted()
    solution.set_value(t, 3)
    solution.set_slot(s, 4)
    assert (t.value, s.s) == (6, 4)


Row = collections.namedtuple("Row", "x y")


def test_replace_of_our_named_tuple_is_our_named_tuple():
    moved = solution.moved(Row(1, 2))
    assert moved == Row(10, 2) and type(moved) is Row


class Refused(Exception):
    pass


def test_our_exception_raised_through_the_solution_is_ours():
    def cb():
        raise Refused("no")

    with pytest.raises(Refused, match="^no$"):
        solution.call(cb)


def guarded(log):
    try:
        yield
    except KeyError:
        log.append("caught")
        raise


def test_the_solutions_contextmanager_of_our_generator_function_throws_into_it():
    # (the other way round: the solution's traceback crossed as a handle our `throw` refused)
    log = []
    assert solution.in_context(guarded, log) == "raised on" and log == ["caught"]


def test_the_cause_of_the_solutions_exception_reaches_us():
    def cb():
        raise KeyError("k")

    with pytest.raises(ValueError) as info:
        solution.wrap_key_error(cb)
    assert isinstance(info.value.__cause__, KeyError) and info.value.__suppress_context__


def test_the_solution_reads_our_callbacks_parameters():
    def two(a, b=1, *rest, c, **more):
        pass

    assert solution.arity(two) == ["a", "b", "rest", "c", "more"]
    assert solution.arity(Box(0).make) == ["a"]


def test_the_solution_awaits_our_coroutine_and_walks_our_async_generator():
    async def tenfold(x):
        await asyncio.sleep(0)
        return x * 10

    async def upto(n):
        for i in range(n):
            yield i

    assert solution.run(tenfold, 3) == 30
    assert solution.run(lambda x: x + 1, 3) == 4
    assert solution.total(upto(4)) == 6


def test_we_walk_the_solutions_async_generator():
    async def collect():
        return [x async for x in solution.numbers(3)]

    assert asyncio.run(collect()) == [0, 1, 2]



def test_our_mock_specced_by_the_solutions_class_is_one_to_it():
    m = mock.MagicMock(spec=solution.Plugin)
    m.name = "mocked"
    assert solution.register(m) == "mocked"
    auto = mock.create_autospec(solution.Plugin, instance=True)
    auto.name = "auto"
    assert solution.register(auto) == "auto"
    with pytest.raises(TypeError):
        solution.register(mock.MagicMock())


class Decorated:
    def __init__(self):
        self.v = 5

    @solution.logged
    def get(self, x):
        return self.v + x

    @staticmethod
    @solution.logged
    def static(x):
        return x


def test_the_solutions_decorator_on_our_method_binds_as_a_function():
    # (cachetools' `@cachedmethod(...)` on a tests' class's method: the wrapper, a proxy, took
    # no `self`; it binds as the function it stands for, and is still no routine to inspect)
    import inspect

    assert Decorated().get(1) == ("logged", 6) and Decorated.get(Decorated(), 2) == ("logged", 7)
    assert Decorated.static(3) == ("logged", 3)
    assert not inspect.isroutine(Decorated.get) and hasattr(Decorated.get, "__get__")


class Counted:
    def __init__(self, cache):
        self.cache = cache
        self.count = 0

    @solution.cachedmethod(lambda self: self.cache)
    def get(self, value):
        self.count += 1
        return self.count


def test_the_solution_fills_the_container_our_callback_answers_from_our_object():
    # (cachetools' `cachedmethod(lambda self: self.cache)`: the answer, `self.cache` of an
    # object the call was handed, was a copy, so nothing was ever cached)
    c = Counted({})
    assert [c.get(1), c.get(1), c.get(2)] == [1, 1, 2] and len(c.cache) == 2


class Int(fractions.Fraction):
    pass


def test_our_object_the_solution_only_passed_on_is_ours_alone_after_the_call():
    # (cachetools' `cachedmethod` over our `WeakValueDictionary`: the value it made through
    # our callback and stored there stayed alive, held for the tested process, which released
    # it only with a later message, or never: the entry outlived `gc.collect()`)
    cache = weakref.WeakValueDictionary()
    assert solution.weakly_cached(cache, "k", lambda: Int(1)) == 1
    gc.collect()
    assert "k" not in cache
    held = solution.weakly_cached(cache, "k", lambda: Int(2))
    assert solution.weakly_cached(cache, "k", lambda: Int(3)) is held == 2
    ref = weakref.ref(solution.weakly_cached({}, "k", lambda: Int(4)))
    gc.collect()
    assert ref() is None


def test_an_object_holding_random_choice_pickles():
    # (cachetools' RRCache(choice=random.choice): the tested process's `random.choice`, which
    # takes the tests' random state first, was a function of the runtime's module)
    assert solution.pickled_chooser() == 7


def test_the_context_the_solution_suppressed_stays_suppressed():
    with pytest.raises(KeyError) as info:
        solution.popped({})
    e = info.value
    assert e.__cause__ is None and e.__suppress_context__ and isinstance(e.__context__, KeyError)


def test_the_solution_fills_an_object_of_our_dict_class():
    # (toml's `loads(text, _dict=TestDict)`: `d[k] = v` on our object asked for its
    # `__setitem__` by name, which no getattr of the tested process is answered)
    class TestDict(dict):
        pass

    d = solution.loads("a=1\\nb=2", _dict=TestDict)
    assert isinstance(d, TestDict) and d == {"a": "1", "b": "2"}


def test_the_solution_changes_our_containers_by_their_operators():
    class D(dict):
        pass

    class L(list):
        pass

    class S(set):
        pass

    d, xs, s = D(a=1), L([1, 2, 3]), S({1, 2})
    solution.changed(d, xs, s)
    assert (d, xs, s) == ({"b": 2, "c": 3}, [9, 3, 4], {2, 5})


def test_the_solutions_object_equals_a_dict_of_its_fields():
    # (semver's `Version.parse(text) == {"major": 1, ...}`: no mapping, so `dict(v)` says
    # nothing of it; it holds the items under their names)
    v = solution.version("1.2")
    assert v == {"major": 1, "minor": 2, "pre": None} and v == {"major": 1, "minor": 2}
    assert not (v != {"major": 1, "minor": 2}) and v != {"major": 1, "minor": 3}
"""


def _shapes_run(factory: pytest.TempPathFactory, solution: str, tests: str) -> Run:
    """One pytest run of `tests` through the runtime, `solution` the workspace's."""
    layout = Layout(Path(factory.mktemp("shapes")) / "verifier")
    layout.files("workspace", {"solution.py": solution})
    layout.files("tests", {"test_shapes.py": tests})
    layout.view()
    return layout.pytest("-rA")


@pytest.fixture(scope="module")
def handed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _shapes_run(tmp_path_factory, HANDED_SOLUTION, HANDED_TESTS)


@pytest.mark.parametrize("case", re.findall(r"^def (test_\w+)", HANDED_TESTS, re.M))
def test_what_the_solution_does_with_the_tests_objects(handed: Run, case: str) -> None:
    assert _outcome(handed, case) == "PASSED", handed.output[-4000:]


# ---- the tests' subclasses of the solution's classes -----------------------------------------
# `class Fake(solution.Base)` in the tests: made in the tested process too (subclasses.py),
# so its objects are the solution's objects with the tests' methods; and the tests' patches,
# specs and `async with` of the solution's classes (a hunt, stop 50). Each shape
# failed before (a local class whose objects had no real object behind them: `self.x = ...`
# refused, `super().__init__` object's, the solution's methods unreachable, abstract methods
# and `__init_subclass__` never run).
SUBCLASSED_SOLUTION = """import abc
import dataclasses
import typing


class Base:
    registry = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Base.registry.append(cls.__name__)

    def __init__(self, name):
        self.name = name
        self._log = []

    def hook(self):
        return "base"

    def run(self):
        self._log.append(self.hook())
        return "%s:%s" % (self.name, self.hook())

    def _helper(self):
        return len(self._log)

    @classmethod
    def create(cls, name):
        return cls(name)


class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self):
        ...

    def describe(self):
        return "area %s" % self.area()


def runs(obj):
    return obj.run(), obj._helper(), isinstance(obj, Base)


def registered():
    return list(Base.registry)


class Tagged:
    def __init_subclass__(cls, tag=None, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.tag = tag


class Named:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "named " + self.name

    def __eq__(self, other):
        return isinstance(other, Named) and self.name == other.name

    __hash__ = None

    @property
    def label(self):
        return "label-" + self.name

    @classmethod
    def make(cls, name):
        return cls(name)


T = typing.TypeVar("T")


class Repo(typing.Generic[T]):
    def __init__(self):
        self.items = []

    def add(self, x):
        self.items.append(x)


class Node:
    __slots__ = ("val",)

    def __init__(self, val):
        self.val = val


@dataclasses.dataclass
class Item:
    name: str

    def __post_init__(self):
        self.name = self.name.strip()


class Calc:
    def compute(self, x):
        return x

    def run(self, x):
        return self.compute(x) + 1


class Resource:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def value(self):
        return 42


async def use(manager):
    async with manager as entered:
        return entered.value()


class Counter:
    def __init__(self, n):
        self.i, self.n = 0, n

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


def drained(it):
    return list(it)


class Sized:
    def __init__(self, getsizeof=None):
        if getsizeof:
            self.getsizeof = getsizeof

    @staticmethod
    def getsizeof(value):
        return 1

    def kind(self):
        return "class"


def set_kind(obj, value):
    obj.kind = value
"""
SUBCLASSED_TESTS = """import asyncio
from unittest import mock

import pytest
import solution


class Fake(solution.Base):
    def __init__(self, name, extra):
        super().__init__(name)
        self.extra = extra

    def hook(self):
        return "fake-%s" % self.extra


class Square(solution.Shape):
    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side ** 2


class Incomplete(solution.Shape):
    pass


def test_a_subclass_overrides_and_inherits():
    f = Fake("a", 1)
    assert f.run() == "a:fake-1"
    assert f._helper() == 1 and f.extra == 1 and f.name == "a"
    assert isinstance(f, solution.Base) and type(f) is Fake


def test_the_solution_sees_the_subclass_object():
    assert solution.runs(Fake("b", 2)) == ("b:fake-2", 1, True)


def test_the_base_classmethod_still_makes_the_base():
    assert solution.Base.create("c").run() == "c:base"


def test_init_subclass_ran_there():
    assert "Fake" in solution.registered()


def test_abstract_methods():
    assert Square(3).describe() == "area 9"
    with pytest.raises(TypeError):
        Incomplete()


class Deeper(Fake):
    def hook(self):
        return "deeper:" + super().hook()


def test_a_subclass_of_a_subclass():
    assert Deeper("d", 4).run() == "d:deeper:fake-4"


class Counting(solution.Base):
    calls = 0
    label = "counting"

    @property
    def shout(self):
        return self.name.upper()

    @staticmethod
    def twice(x):
        return 2 * x

    def run(self):
        Counting.calls += 1
        return "counted " + super().run()


def test_super_of_an_overridden_method_and_class_things():
    c = Counting.create("e")
    assert type(c) is Counting
    assert c.run() == "counted e:base" and Counting.calls == 1
    assert c.shout == "E" and c.twice(3) == 6 and Counting.twice(4) == 8
    assert c.label == "counting" and Counting.label == "counting"


def test_the_bases_own_objects_still_work():
    b = solution.Base("f")
    assert b.run() == "f:base" and b._helper() == 1


class Kept(solution.Tagged, tag="kept"):
    pass


def test_the_class_statements_keywords_reach_init_subclass_there():
    assert Kept.tag == "kept"


class Shouting(solution.Named):
    def __str__(self):
        return super().__str__().upper()

    def __eq__(self, other):
        return super().__eq__(other) and isinstance(other, Shouting)

    __hash__ = None

    @property
    def label(self):
        return super().label + "!"

    @classmethod
    def make(cls, name):
        return super().make(name + "?")


def test_super_reaches_the_real_special_methods_properties_and_classmethods():
    s = Shouting("ann")
    assert str(s) == "NAMED ANN" and s == Shouting("ann") and s != solution.Named("ann")
    assert s.label == "label-ann!"
    made = Shouting.make("bo")
    assert type(made) is Shouting and made.name == "bo?"


class IntRepo(solution.Repo[int]):
    pass


def test_a_generic_base():
    r = IntRepo()
    r.add(1)
    assert r.items == [1] and isinstance(r, solution.Repo)


class Doubly(solution.Node):
    __slots__ = ("prev",)


def test_slots_of_the_subclass():
    d = Doubly(1)
    d.prev = None
    assert (d.val, d.prev) == (1, None)


class Upper(solution.Item):
    def __post_init__(self):
        super().__post_init__()
        self.name = self.name.upper()


def test_super_post_init_of_a_dataclass():
    assert Upper(" ab ").name == "AB"


class Explicit(solution.Base):
    def __init__(self, name):
        # (cachetools' tests: `TTLCache.__init__(self, maxsize, ttl=ttl, timer=Timer())`)
        solution.Base.__init__(self, name.upper())


def test_the_base_classs_init_called_by_name():
    e = Explicit("ab")
    assert e.name == "AB" and solution.runs(e) == ("AB:base", 1, True)
    with pytest.raises(TypeError):
        solution.Base.__init__(object(), "x")


def test_a_method_patched_on_the_solutions_class_binds(monkeypatch):
    def tenfold(self, x):
        return 10 * x

    monkeypatch.setattr(solution.Calc, "compute", tenfold)
    assert solution.Calc().run(1) == 11
    monkeypatch.setattr(solution.Calc, "compute", lambda self, x: 0)
    assert solution.Calc().run(5) == 1


def test_and_is_the_classs_own_again_after_the_undo():
    assert solution.Calc().run(5) == 6
    with mock.patch.object(solution.Calc, "compute", return_value=7):
        assert solution.Calc().run(5) == 8
    assert solution.Calc().run(5) == 6


def test_a_mock_specced_by_the_solutions_class():
    m = mock.Mock(spec=solution.Calc)
    m.compute.return_value = 3
    assert m.compute(1) == 3 and "run" in dir(solution.Calc)
    auto = mock.create_autospec(solution.Calc)
    auto.run.return_value = 4
    assert auto.run(2) == 4


class Mine:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def value(self):
        return 7


def test_async_with_of_either_sides_manager():
    async def go():
        async with solution.Resource() as r:
            return r.value()

    assert asyncio.run(go()) == 42
    assert asyncio.run(solution.use(Mine())) == 7


class Doubled(solution.Counter):
    def __next__(self):
        return 2 * super().__next__()


def test_super_next_of_an_iterator_runs_the_real_one_and_its_stop_ends_the_loop():
    # The mirror's `__next__` (iterators.py, which reads ahead) asked the object there for its
    # next item, and the object's `__next__` is the tests' own: it called itself for ever.
    # The real one's StopIteration, raised through the tests' `__next__`, ends each loop.
    assert list(Doubled(3)) == [2, 4, 6]
    walked = []
    for x in Doubled(2):
        walked.append(x)
    assert walked == [2, 4] and next(iter(Doubled(3))) == 2
    one = Doubled(1)
    assert next(one) == 2
    with pytest.raises(StopIteration):
        next(one)
    assert solution.drained(Doubled(2)) == [2, 4]


class SizedTest(solution.Sized):
    def __init__(self, **kwargs):
        solution.Sized.__init__(self, **kwargs)


def test_what_the_objects_dictionary_holds_comes_before_the_bases_method():
    # (cachetools' `TTLTestCache(maxsize=3, getsizeof=lambda x: x)`: `self.getsizeof =
    # getsizeof` there, and `cache.getsizeof(2)` ran the class's static method)
    s = SizedTest(getsizeof=lambda x: x)
    assert s.getsizeof(2) == 2
    sizer = s.getsizeof
    assert sizer(3) == 3 and SizedTest().getsizeof(2) == 1
    solution.set_kind(s, "own")
    assert s.kind == "own" and SizedTest().kind() == "class"
"""


@pytest.fixture(scope="module")
def subclassed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _shapes_run(tmp_path_factory, SUBCLASSED_SOLUTION, SUBCLASSED_TESTS)


@pytest.mark.parametrize("case", re.findall(r"^def (test_\w+)", SUBCLASSED_TESTS, re.M))
def test_the_tests_subclasses_of_the_solutions_classes(subclassed: Run, case: str) -> None:
    assert _outcome(subclassed, case) == "PASSED", subclassed.output[-4000:]


# Module docstrings, as the tests' stub module carries them (sources.py `adopt`, which reads the
# text's first statement alone where it parses alone).
DOCSTRING_SHAPES = {
    "after a comment and an encoding line": (
        '# -*- coding: utf-8 -*-\n# Copyright\n\n"""Tools.\n\n    Indented."""\nx = 1\n',
        "Tools.\n\n    Indented.",
    ),
    "parenthesized, over two lines": ('("Parts "\n "joined.")\nx = 1\n', "Parts joined."),
    "with a statement after it on its line": ('"Short."; x = 1\n', "Short."),
    "after a line continuation": ('"Split " \\\n"here."\nx = 1\n', "Split here."),
    "none: the first statement is compound": ('if True:\n    """Not one."""\nx = 1\n', None),
    "none: the first statement is decorated": (
        '@staticmethod\ndef f():\n    """Not one."""\nx = 1\n',
        None,
    ),
    "none: bytes": ('b"Not one."\nx = 1\n', None),
    "none: an f-string": ('f"Not {1}."\nx = 1\n', None),
}


@pytest.mark.parametrize("shape", list(DOCSTRING_SHAPES))
def test_a_workspace_modules_docstring_is_its_texts(tmp_path: Path, shape: str) -> None:
    text, doc = DOCSTRING_SHAPES[shape]
    tests = f"import solution\n\n\ndef test_doc():\n    assert solution.__doc__ == {doc!r}\n"
    run = _graded(tmp_path, text, "test_doc.py", tests)
    assert run.rc == 0, run.output


# ---- exceptions that cross back to the side that made them -----------------------------------
# An exception of a builtin, standard library or installed class crosses as a copy, our own
# class's instance; one that crosses back is its sender's original again, so the identity
# checks of the tests (`info.value is err`, `__cause__ is err`) and of contextlib's
# `__exit__` (`exc is value`: a StopIteration in the body of the tests' `contextmanager` of
# the solution's generator read as RuntimeError) hold as in one process. Each shape failed
# on 40e1349's runtime (a copy of the copy came back).
RETURNED_SOLUTION = """
class Wrapped(Exception):
    pass


def call(cb):
    return cb()


def reraise(cb):
    try:
        return cb()
    except ValueError:
        raise


def reraise_named(cb):
    try:
        return cb()
    except ValueError as e:
        raise e


def wrap(cb):
    try:
        return cb()
    except ValueError as e:
        raise Wrapped("wrapped") from e


def convert(cb):
    try:
        return cb()
    except ValueError:
        raise KeyError("k")


def fail_with(err):
    raise err


def caught(cb):
    try:
        cb()
    except Exception as e:
        return e


def same(x):
    return x


_RAISED = []


def failing():
    _RAISED.append(ValueError("mine"))
    raise _RAISED[-1]


def is_mine(e):
    return e is _RAISED[-1]


_KEPT = [None]


def keep(x):
    _KEPT[0] = x


def kept():
    return _KEPT[0]


def managed(log):
    log.append("enter")
    try:
        yield 1
    finally:
        log.append("exit")


async def managed_async(log):
    log.append("enter")
    try:
        yield 1
    finally:
        log.append("exit")
"""
RETURNED_TESTS = """
import asyncio
import contextlib
import sys

import pytest

import solution


def _raising(err):
    def cb():
        raise err

    return cb


def test_our_exception_raised_on_through_the_solution_is_ours():
    err = ValueError("x")
    for fn in (solution.call, solution.reraise, solution.reraise_named):
        with pytest.raises(ValueError) as info:
            fn(_raising(err))
        assert info.value is err, fn
        assert info.traceback[-1].name == "cb"


def test_the_chain_of_the_solutions_exception_is_ours():
    err = ValueError("x")
    with pytest.raises(solution.Wrapped) as info:
        solution.wrap(_raising(err))
    assert info.value.__cause__ is err
    with pytest.raises(KeyError) as info:
        solution.convert(_raising(err))
    assert info.value.__context__ is err


def test_our_exception_handed_over_comes_back_as_ours():
    err = KeyError("k")
    with pytest.raises(KeyError) as info:
        solution.fail_with(err)
    assert info.value is err and err.__traceback__ is not None
    assert solution.same(err) is err and solution.same([err])[0] is err
    assert solution.caught(_raising(err)) is err
    assert solution.same(StopIteration(1)) is not solution.same(StopIteration(1))


def test_the_solutions_exception_handed_back_is_its_own():
    with pytest.raises(ValueError) as info:
        solution.failing()
    assert solution.is_mine(info.value)
    assert not solution.is_mine(ValueError("mine"))


def test_our_exception_is_kept_while_the_solution_keeps_its_copy():
    endpoint = sys.modules["_rollouts_trusted"]._endpoint
    err = KeyError("kept")
    solution.keep(err)
    solution.call(lambda: None)  # (a request of the tested process's: releases go with it)
    assert solution.kept() is err
    assert any(o is err for o in list(endpoint.exports.values()))
    solution.keep(None)
    solution.call(lambda: None)
    assert not any(o is err for o in list(endpoint.exports.values()))


def test_our_contextmanager_of_the_solutions_generator_lets_the_bodys_exception_through():
    log = []
    cm = contextlib.contextmanager(solution.managed)
    with pytest.raises(StopIteration):
        with cm(log):
            raise StopIteration
    with pytest.raises(StopIteration):
        with cm(log):
            next(iter([]))
    err = KeyError("k")
    with pytest.raises(KeyError) as info:
        with cm(log):
            raise err
    assert info.value is err
    with pytest.raises(KeyError) as info:
        with contextlib.ExitStack() as stack:
            stack.enter_context(cm(log))
            stack.callback(solution.same, 1)
            raise err
    assert info.value is err
    assert log == ["enter", "exit"] * 4


def test_our_asynccontextmanager_of_the_solutions_async_generator_too():
    log = []
    acm = contextlib.asynccontextmanager(solution.managed_async)

    async def body(err):
        try:
            async with acm(log):
                raise err
        except BaseException as e:
            return e

    for err in (StopIteration(), StopAsyncIteration(), KeyError("k")):
        assert asyncio.run(body(err)) is err, err
    assert log == ["enter", "exit"] * 3
"""


@pytest.fixture(scope="module")
def returned(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _shapes_run(tmp_path_factory, RETURNED_SOLUTION, RETURNED_TESTS)


@pytest.mark.parametrize("case", re.findall(r"^def (test_\w+)", RETURNED_TESTS, re.M))
def test_exceptions_that_cross_back_are_their_senders_own(returned: Run, case: str) -> None:
    assert _outcome(returned, case) == "PASSED", returned.output[-4000:]


# cachetools' own tests: a unittest.TestCase hands its method to the solution's decorator, and
# reads back what the wrapper wraps (`functools.wraps` sets `__wrapped__`).
WRAPPING_SOLUTION = """
import functools


def cached(fn):
    memo = {}

    @functools.wraps(fn)
    def wrapper(*args):
        if args not in memo:
            memo[args] = fn(*args)
        return memo[args]

    return wrapper
"""
WRAPPING_TESTS = """
import unittest

import solution


class Counting:
    def func(self, x):
        self.count = getattr(self, "count", 0) + 1
        return x * 10


class CachedTest(Counting, unittest.TestCase):
    def test_our_method_handed_over_is_called(self):
        wrapper = solution.cached(self.func)
        self.assertEqual(wrapper(1), 10)
        self.assertEqual(wrapper(1), 10)
        self.assertEqual(self.count, 1)

    def test_what_it_wraps_is_our_method(self):
        wrapper = solution.cached(self.func)
        self.assertEqual(wrapper.__wrapped__, self.func)
        self.assertEqual(wrapper.__name__, "func")
"""


def test_a_test_cases_method_wrapped_by_the_solution(tmp_path: Path) -> None:
    run = _graded(tmp_path, WRAPPING_SOLUTION, "test_wrapping.py", WRAPPING_TESTS)
    assert run.rc == 0 and "2 passed" in run.output, run.output
    assert run.named("value_hack") == []


# The solution's subclasses of list, dict and set, changed by their own methods (or by another
# of its functions) after the tests got them: the tests' `==`, `len`, `[i]` and iteration,
# the builtin's own, read the value the object holds now (based.py `resend_changed`).
BASED_SOLUTION = """
class Stack(list):
    def push(self, x):
        self.append(x)

    def peek(self):
        return self[-1]


class Registry(dict):
    def register(self, name):
        self[name] = len(self)


class Tags(set):
    def tag(self, *names):
        for n in names:
            self.add(n)


class Matrix(list):
    def transpose(self):
        self[:] = [list(r) for r in zip(*self)]

    def scale(self, k):
        for row in self:
            for i in range(len(row)):
                row[i] *= k
        return self


class Lower(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key.lower(), value)


class Config(dict):
    def __setattr__(self, name, value):
        self[name] = value

    def __ior__(self, other):
        for k, v in other.items():
            self[k] = v * 2
        return self


def made():
    return Stack([5])


def push_onto(stack, x):
    stack.push(x)
"""
BASED_TESTS = """
import json

import solution


def test_a_list_subclass_changed_by_its_own_method():
    s = solution.Stack()
    s.push(1)
    s.push(2)
    assert s == [1, 2] and len(s) == 2 and s[-1] == 2 and list(s) == [1, 2]
    s.append(3)  # (the builtin's own: here and there)
    assert s.peek() == 3 and s == [1, 2, 3]


def test_a_dict_subclass_and_a_set_subclass():
    r = solution.Registry()
    r.register("a")
    r.register("b")
    assert json.dumps(r) == '{"a": 0, "b": 1}'  # (C that reads the dict itself: no method)
    assert r == {"a": 0, "b": 1} and sorted(r) == ["a", "b"] and r["b"] == 1
    t = solution.Tags()
    t.tag("x", "y")
    assert t == {"x", "y"} and "x" in t and len(t) == 2


def test_one_it_answered_changed_by_another_function():
    s = solution.made()
    solution.push_onto(s, 6)
    assert s == [5, 6]


def test_a_dict_changed_by_its_own_item_and_attribute_assignment():
    d = solution.Lower()
    d["A"] = 1
    assert d == {"a": 1} and "a" in d
    c = solution.Config()
    c.name = "x"
    c |= {"n": 1}
    assert c == {"name": "x", "n": 2} and len(c) == 2


def test_a_matrix_changed_in_place():
    m = solution.Matrix([[1, 2], [3, 4]])
    m.transpose()
    assert m == [[1, 3], [2, 4]]
    m.scale(10)  # (its rows, lists inside it, changed in place)
    assert m == [[10, 30], [20, 40]] and m[1] == [20, 40]
"""


def test_the_solutions_builtin_subclasses_changed_after_they_crossed(tmp_path: Path) -> None:
    run = _graded(tmp_path, BASED_SOLUTION, "test_based.py", BASED_TESTS)
    assert run.rc == 0 and "5 passed" in run.output, run.output
    assert run.named("value_hack") == []


# A read that changes the object: a cache that fills itself on a miss (boltons' `LRI`), an LRU
# that moves what was read to the end. `c[k]` asks the real object (its class defines
# `__getitem__`), and what the read changed reaches the tests' later `len`, `==` and
# iteration: boltons 24.1.0's `test_cacheutils` failed here until stop 65.
READ_CHANGING_SOLUTION = """
class Filling(dict):
    def __init__(self, fill):
        super().__init__()
        self.fill = fill

    def __getitem__(self, key):
        if not dict.__contains__(self, key):
            dict.__setitem__(self, key, self.fill(key))
        return dict.__getitem__(self, key)


class Recent(dict):
    def __getitem__(self, key):
        value = dict.pop(self, key)
        dict.__setitem__(self, key, value)
        return value


class Ring(list):
    def __getitem__(self, i):
        value = list.__getitem__(self, i)
        self.append(list.pop(self, 0))
        return value
"""
READ_CHANGING_TESTS = """
import solution


def test_a_cache_that_fills_on_a_miss():
    c = solution.Filling(len)
    assert c["abc"] == 3
    assert len(c) == 1 and c == {"abc": 3} and "abc" in c
    assert c["abc"] == 3 and c["de"] == 2
    assert sorted(c) == ["abc", "de"]


def test_a_read_that_reorders():
    r = solution.Recent(a=1, b=2, c=3)
    assert r["a"] == 1
    assert list(r) == ["b", "c", "a"]
    r["b"]
    assert list(r.items()) == [("c", 3), ("a", 1), ("b", 2)]
    ring = solution.Ring([1, 2, 3])
    assert ring[0] == 1 and ring == [2, 3, 1]
"""


def test_a_read_that_changes_the_solutions_builtin_subclass(tmp_path: Path) -> None:
    run = _graded(tmp_path, READ_CHANGING_SOLUTION, "test_reads.py", READ_CHANGING_TESTS)
    assert run.rc == 0 and "2 passed" in run.output, run.output
    assert run.named("value_hack") == []


# The solution's descriptors in the tests' classes: `@solution.cached_property` on a method of
# theirs, a class property, a checked attribute (`size = solution.Typed(int)`, kept as
# `obj._size`), each run on the real descriptor where it lives (proxies.py
# `DESCRIPTOR_METHODS`); the mirror had no `__get__`, so `t.area` was the descriptor itself
# (boltons 24.1.0's `cachedproperty` and `cachedmethod` tests) until stop 65.
DESCRIPTOR_PROTOCOL_SOLUTION = """
class cached_property:
    def __init__(self, func):
        self.func = func

    def __set_name__(self, owner, name):
        self.name = name
        self.owner = owner.__name__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


class classproperty:
    def __init__(self, fget):
        self.fget = fget

    def __get__(self, obj, owner):
        return self.fget(owner)


class Node:
    def __init__(self, value):
        self.value = value


class Integer:  # (the descriptor how-to's: its value kept under its own name)
    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else obj.__dict__[self.name]

    def __set__(self, obj, value):
        if not isinstance(value, int):
            raise TypeError("not an int")
        obj.__dict__[self.name] = value


class Typed:
    def __init__(self, kind):
        self.kind = kind

    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        if not isinstance(value, self.kind):
            raise TypeError("%s must be %s" % (self.name[1:], self.kind.__name__))
        setattr(obj, self.name, value)

    def __delete__(self, obj):
        delattr(obj, self.name)
"""
DESCRIPTOR_PROTOCOL_TESTS = """
import pytest

import solution
from solution import Integer, Typed, cached_property, classproperty


class Thing:
    calls = 0

    @cached_property
    def area(self):
        Thing.calls += 1
        return 6

    @cached_property
    def root(self):
        return solution.Node(1)

    count = Integer()

    @classproperty
    def label(cls):
        return cls.__name__.lower()

    size = Typed(int)


def test_a_cached_property():
    t = Thing()
    assert t.area == 6 and t.area == 6 and Thing.calls == 1
    assert vars(t) == {"area": 6}
    assert Thing.area.name == "area" and Thing.area.owner == "Thing"
    area = Thing.__dict__["area"]
    assert isinstance(area, cached_property) and hasattr(area, "__get__")
    assert area.__get__(None, Thing) is area and t.root is t.root and t.root.value == 1


def test_a_class_property():
    assert Thing.label == "thing" and Thing().label == "thing"


def test_a_checked_attribute():
    t = Thing()
    t.size = 3
    assert t.size == 3 and t._size == 3
    with pytest.raises(TypeError, match="size must be int"):
        t.size = "x"
    del t.size
    assert not hasattr(t, "_size")
    t.count = 4
    assert t.count == 4 and vars(t)["count"] == 4
    with pytest.raises(TypeError):
        t.count = "x"
"""


def test_the_solutions_descriptors_in_the_tests_classes(tmp_path: Path) -> None:
    run = _graded(
        tmp_path, DESCRIPTOR_PROTOCOL_SOLUTION, "test_descriptors.py", DESCRIPTOR_PROTOCOL_TESTS
    )
    assert run.rc == 0 and "3 passed" in run.output, run.output
    assert run.named("value_hack") == []


# `vars(x)` and `x.__dict__` of the other side's object: the real object's attributes (a copy
# asked at each read, whose changes go there as attributes: proxies.py `InstanceDictionary`),
# never the proxy's own state; of the tests' object, only what the tested code may read of it.
# And `dir()` of the solution's class: its real class's names, not the mirror's.
INSTANCE_DICTIONARY_SOLUTION = """
class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y


def fields(obj):
    return dict(vars(obj))


def fill(obj, **values):
    obj.__dict__.update(values)


def has(obj, name):
    return name in obj.__dict__


class Record(dict):  # (a mirror of a builtin's subclass: based.py)
    def __init__(self, **items):
        super().__init__(**items)
        self.meta = "m"


class Row(list):
    def __init__(self, *items):
        super().__init__(items)
        self.tag = "t"
"""
INSTANCE_DICTIONARY_TESTS = """
import functools
import json

import solution


class Record:
    def __init__(self):
        self.a = 1
        self._private = "kept"


def test_the_solutions_object():
    p = solution.Point(1, 2)
    assert vars(p) == {"x": 1, "y": 2} and json.dumps(p.__dict__) == '{"x": 1, "y": 2}'
    p.__dict__["x"] = 7
    assert p.x == 7 and "y" in vars(p)


def test_the_tests_object():
    r = Record()
    assert solution.fields(r) == {"a": 1}
    solution.fill(r, b=2)
    assert r.b == 2 and solution.has(r, "b") and not solution.has(r, "_private")


def test_a_function_wrapped_by_the_tests():
    @functools.wraps(solution.fields)
    def fields(obj):
        return solution.fields(obj)

    assert fields.__name__ == "fields" and "_rollouts_oid" not in vars(fields)


def test_the_names_of_the_solutions_class():  # (munch's tests parametrize by `dir(Munch)`)
    names = set(dir(object)) | {"__dict__", "__module__", "__weakref__", "__init__"}
    assert set(dir(solution.Point)) == names


def test_the_solutions_dict_and_list_subclasses():
    record, row = solution.Record(a=1), solution.Row(1, 2)
    assert vars(record) == {"meta": "m"} and row.__dict__ == {"tag": "t"}
    assert record == {"a": 1} and row == [1, 2]
"""


def test_the_other_sides_instance_dictionary(tmp_path: Path) -> None:
    run = _graded(tmp_path, INSTANCE_DICTIONARY_SOLUTION, "test_vars.py", INSTANCE_DICTIONARY_TESTS)
    assert run.rc == 0 and "5 passed" in run.output, run.output
    assert run.named("value_hack") == []


# What an answer names must still be there when the other side decodes it. A list of the
# tests' that the solution keeps is one object on both sides (shares.py), and an object of the
# tests' is a proxy there; a chunk of an iterator's items (readahead.py) encodes each as it
# comes and lets go of it. more-itertools 10.5.0's `intersperse(e, iterable, n=3)` keeps a
# list `e` of the tests' (`repeat([e])`) and its chunk both named the share and ended it
# ("sx"); its `sliced` over a tests' list subclass whose slices are new objects of that class
# yields them, and each proxy died before the chunk was sent, so the chunk named objects the
# tests' side had just released ("rel"). Either broke the channel ("bad 'K' node", "bad 'x'
# node") and with it every later test of the session, until stop 64.
KEPT_LIST_SOLUTION = """
from functools import partial
from itertools import chain, count, islice, repeat, takewhile


def intersperse(e, iterable, n=1):
    chunks = iter(partial(lambda it: list(islice(it, n)), iter(iterable)), [])
    pairs = chain.from_iterable(zip(repeat([e]), chunks))
    return chain.from_iterable(islice(pairs, 1, None))


def sliced(seq, n):
    return takewhile(len, (seq[i : i + n] for i in count(0, n)))
"""
KEPT_LIST_TESTS = """
import solution


def test_a_list_kept_and_yielded_later():
    for n, element in [(2, "_"), (3, ["a", "b"])]:
        actual = list(solution.intersperse(element, (x for x in "012345"), n=n))
        assert actual[n] == element and len(actual) == 6 + 5 // n
        assert n == 2 or actual[n] is element


class Slices(list):
    def __getitem__(self, key):
        found = super().__getitem__(key)
        return Slices(found) if isinstance(key, slice) else found


def test_objects_of_ours_yielded_and_let_go_of():
    actual = list(solution.sliced(Slices(range(9)), 3))
    assert actual == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert all(type(part) is Slices for part in actual)
    assert list(solution.sliced("ABCDEFGHI", 4)) == ["ABCD", "EFGH", "I"]
"""


def test_what_an_answer_names_outlives_its_sending(tmp_path: Path) -> None:
    run = _graded(tmp_path, KEPT_LIST_SOLUTION, "test_kept_list.py", KEPT_LIST_TESTS)
    assert run.rc == 0 and "2 passed" in run.output, run.output


# A one-shot iterator handed to a builtin mutator of a mirror (a list, dict or set subclass's
# object of the other side): the copy here and the real object there both get its items.
# toolz 1.0.0's `valmap(f, d, factory=...)` does `rv = factory(); rv.update(zip(...))` with
# the tests' defaultdict subclass, and the copy used the zip up: the tests' object stayed
# empty (until stop 64, when a stated limit for the other direction too).
FILLED_SOLUTION = """
class Stack(list):
    def peek(self):
        return self[-1]


class Registry(dict):
    def size(self):
        return len(self)


def valmap(f, d, factory=dict):
    rv = factory()
    rv.update(zip(d.keys(), map(f, d.values())))
    return rv


def squares(factory, n):
    rv = factory()
    rv.extend(x * x for x in range(n))
    rv[1:2] = iter([10, 11])
    return rv


def itemmap(f, d, factory=dict):
    rv = factory()
    rv.update(map(f, d.items()))
    return rv


def absolutes(factory, xs):
    rv = factory()
    rv.update(map(abs, xs), iter([0]))
    return rv
"""
FILLED_TESTS = """
from collections import defaultdict

import pytest

import solution


class Counts(defaultdict):
    def __eq__(self, other):
        return super().__eq__(other) and isinstance(other, defaultdict)


class Items(list):
    pass


class Seen(set):
    pass


def test_the_tests_objects_filled_from_iterators():
    got = solution.valmap(lambda v: v + 1, {1: 1, 2: 2}, factory=lambda: Counts(int))
    assert got == Counts(int, {1: 2, 2: 3}) and type(got) is Counts
    got = solution.itemmap(reversed, {1: 2, 2: 4}, factory=lambda: Counts(int))
    assert got == Counts(int, {2: 1, 4: 2})
    items = solution.squares(Items, 3)
    assert items == [0, 10, 11, 4] and type(items) is Items
    assert solution.absolutes(Seen, [-1, 2, -3]) == {0, 1, 2, 3}


def test_the_solutions_object_filled_from_an_iterator():
    stack = solution.Stack()
    stack.extend(x for x in "abc")
    assert stack.peek() == "c" and stack == ["a", "b", "c"]
    stack += iter("d")
    assert stack.peek() == "d"
    stack.extend(w for w in "dex" if w not in stack)  # (it reads the object as it grows)
    assert stack == list("abcdex") and stack.peek() == "x"


def feed():
    yield "y"
    raise ValueError("broken feed")


def test_what_the_object_got_before_the_iterator_failed():
    stack = solution.Stack()
    with pytest.raises(ValueError):
        stack.extend(feed())
    assert stack == ["y"] and stack.peek() == "y"
    registry = solution.Registry()
    with pytest.raises(ValueError):
        registry.update(iter([("a", 1), ("b",)]))  # (a pair that is no pair: refused there)
    assert registry == {"a": 1} and registry.size() == 1
"""


def test_a_one_shot_iterator_handed_to_a_mirrors_mutator(tmp_path: Path) -> None:
    run = _graded(tmp_path, FILLED_SOLUTION, "test_filled.py", FILLED_TESTS)
    assert run.rc == 0 and "3 passed" in run.output, run.output
    assert run.named("value_hack") == []


# `x in obj` of a class that defines `__contains__`: what it holds is read by running its
# iteration first (tested.py `_members`), within a number of steps. more-itertools 10.5.0's
# `bucket` over `count()` reads for ever before its first key, and hung the session (until
# stop 64, when that check gave up past the steps: it cannot say, and decoys judge it).
ENDLESS_SOLUTION = """
from collections import defaultdict, deque
from itertools import count


class bucket:
    def __init__(self, iterable, key, validator=None):
        self._it, self._key = iter(iterable), key
        self._cache = defaultdict(deque)
        self._validator = validator or (lambda x: True)

    def __contains__(self, value):
        if not self._validator(value):
            return False
        try:
            item = next(self[value])
        except StopIteration:
            return False
        self._cache[value].appendleft(item)
        return True

    def _get_values(self, value):
        while True:
            if self._cache[value]:
                yield self._cache[value].popleft()
            else:
                while True:
                    try:
                        item = next(self._it)
                    except StopIteration:
                        return
                    item_value = self._key(item)
                    if item_value == value:
                        yield item
                        break
                    elif self._validator(item_value):
                        self._cache[item_value].append(item)

    def __iter__(self):
        for item in self._it:
            item_value = self._key(item)
            if self._validator(item_value):
                self._cache[item_value].append(item)
        yield from self._cache.keys()

    def __getitem__(self, value):
        if not self._validator(value):
            return iter(())
        return self._get_values(value)


def first_digits():
    return bucket(count(0), lambda x: int(str(x)[0]), validator=lambda x: 0 < x < 10)
"""
ENDLESS_TESTS = """
from itertools import islice

import solution


def test_in_of_an_endless_one():
    buckets = solution.first_digits()
    assert list(islice(buckets[1], 3)) == [1, 10, 11]
    assert 0 not in buckets and 2 in buckets
"""


def test_what_an_object_holds_is_read_within_steps(tmp_path: Path) -> None:
    run = _graded(tmp_path, ENDLESS_SOLUTION, "test_endless.py", ENDLESS_TESTS)
    assert run.rc == 0 and "1 passed" in run.output, run.output
    assert run.named("value_hack") == []


# A class of the tests' that sets a special method to None (`__iter__ = None` beside
# `__getitem__`, toolz 1.0.0's `test_isiterable`): its mirror says the same, so `iter()` of it
# raises TypeError in the tested process too (until stop 64, the mirror's `__getitem__` made it
# iterable by the old sequence protocol).
TURNED_OFF_SOLUTION = """
def isiterable(x):
    try:
        iter(x)
        return True
    except TypeError:
        return False
"""
TURNED_OFF_TESTS = """
import solution


class Indexed:
    def __getitem__(self, i):
        return "abc"[i]


class NotIterable(Indexed):
    __iter__ = None


def test_a_special_method_set_to_none():
    assert solution.isiterable(Indexed()) is True
    assert solution.isiterable(NotIterable()) is False
"""


def test_a_special_method_the_tests_class_sets_to_none(tmp_path: Path) -> None:
    run = _graded(tmp_path, TURNED_OFF_SOLUTION, "test_turned_off.py", TURNED_OFF_TESTS)
    assert run.rc == 0 and "1 passed" in run.output, run.output


# A statement the tests' file and the agent's module both hold (`if __name__ == "__main__":
# main()`, boltons 24.1.0's tests and its `ecoutils.py`) is the tests' own in their file:
# pytest's compile of that test module, after another had imported the solution, was refused
# as the agent's code (sources.py), and the session's collection failed (until stop 64).
MAIN_GUARD = """

if __name__ == "__main__":
    main()
"""


def test_a_statement_of_the_tests_file_that_the_agent_also_wrote(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "verifier")
    layout.files("workspace", {"solution.py": "def main():\n    return 1\n" + MAIN_GUARD})
    first = "import solution\n\n\ndef test_first():\n    assert solution.main() == 1\n"
    second = "import solution\n\n\ndef main():\n    pass\n\n\ndef test_second():\n"
    second += "    assert solution.main() == 1\n" + MAIN_GUARD
    layout.files("tests", {"test_a_first.py": first, "test_b_second.py": second})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0 and "2 passed" in run.output, run.output
