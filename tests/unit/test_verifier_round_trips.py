"""Round trips through the verifier's process boundary (issue 37): fewer of them, and nothing a
test can observe changes (laziness, bindings, the random stream).

One pytest run through the runtime (tests/unit/test_verifier_runtime.py's layout, no Docker)
holds every case: the tests count the requests their process sent (the trusted endpoint's
request and answer counters) around what they do.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_verifier_runtime import Layout

SOLUTION = """
import os
import random

made = []


def gen(n):
    for i in range(n):
        made.append(i)
        yield i


def count():
    return len(made)


_kept = []


def kept_iterator(n=None):  # a new iterator over range(n), or the one made last
    if n is not None:
        _kept[:] = [iter(list(range(n)))]
    return _kept[0]


def reset():
    del made[:]


def same_list(n):
    out = []
    for i in range(n):
        out.append(i)
        yield out


def failing(n):
    for i in range(n):
        yield i
    raise ValueError("at %d" % n)


class Text(str):
    pass


def key_kinds(**kw):
    return [type(k).__name__ for k in kw]


def in_a_fork(fn):  # fn() in a forked child: 3 where refused as a fork's, 4 otherwise
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except Exception as e:
            os._exit(3 if "forked" in str(e) else 4)
        os._exit(4)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def values():
    yield from [2**53 - 1, -(2**53) + 1, 2**53, -(2**53), True, 0, 1.5, -0.0, "s", None]
    yield from [Text("t"), (1, 2), b"b", False, 10**5000]


def calling_back(fn, n):
    for i in range(n):
        made.append(i)
        fn(i)
        yield i


def take_all(iterable):
    return list(iterable)


def first(iterable):
    for x in iterable:
        return x


def walk(iterable):
    n = 0
    for _ in iterable:
        n += 1
    return n


def take(it, n):
    return [next(it) for _ in range(n)]


def nth(it, n):
    import itertools

    return next(itertools.islice(it, n, None), None)


def take_then_call(it, n, fn):
    got = take(it, n)
    return got, fn()


def alternate(it, fn):
    return [(x, fn()) for x in it]


def each(it, fn):
    return [fn(x) for x in it]


def kept(fn, iterable):
    for x in iterable:
        if fn(x):
            yield x


_shared = []  # [the tests' list this module keeps, the iterator `walk_changing` walks]


def keep_list(items, take=False):  # keeps the tests' list (a share); `take`: an item of it too
    _shared[:1] = [items]
    return next(_shared[1]) if take else None


def walk_changing(fn, it, at):  # once it keeps the list, it changes item `at` to 99
    _shared[:] = [None, it]
    out = []
    for x in it:
        out.append(fn(x))
        kept_list = _shared[0]
        if kept_list is not None and kept_list[at] != 99:
            kept_list[at] = 99
        out.append(x)
    return out


def listed(n):
    return iter(list(range(n)))


def same(x):
    return x


def helper():
    return "old"


def rebind_and_call(fn):
    global helper

    def helper():
        return "new"

    return fn()


def draw():
    return random.random()


class Box:
    factory = __import__("collections").OrderedDict  # a class: the tests' own one comes back

    def __init__(self):
        self.n = 0
        self.sink = None
        self.handler = lambda k: k * 10  # a function of the object's own, not its class's

    def bump(self, by=1):
        self.n += by
        return self.n

    def attach(self, sink):
        self.sink = sink

    def add(self, item):
        self.sink.append(item)

    def fail(self):
        raise KeyError("inside")

    @property
    def doubler(self):
        return lambda k: 2 * k


def processors(fn):
    import os

    return len(os.sched_getaffinity(0)), fn(os.getpid())


def processors_of_a_child_and_a_thread():
    import os
    import threading

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, str(len(os.sched_getaffinity(0))).encode())
        os._exit(0)
    os.close(w)
    n = int(os.read(r, 100))
    os.waitpid(pid, 0)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(len(os.sched_getaffinity(0))))
    thread.start()
    thread.join()
    return n, seen[0]


def start_drawing():
    import threading
    import time

    def loop():
        while True:
            random.random()
            time.sleep(0.0001)

    threading.Thread(target=loop, daemon=True).start()
"""

TESTS = '''
import collections
import functools
import inspect
import itertools
import os
import random
import sys
from random import seed  # (taken before the tested process starts: more-itertools' tests do)

import pytest

import solution


def requests():
    """Exchanges so far: requests sent, and the tested process's requests served."""
    ep = sys.modules["_rollouts_trusted"]._endpoint
    return ep.next_q + ep.served


def test_a_whole_consumer_takes_a_generator_in_chunks():
    before = requests()
    assert list(solution.gen(3000)) == list(range(3000))
    assert requests() - before < 20  # one request per item before
    assert tuple(solution.gen(5)) == (0, 1, 2, 3, 4)
    assert sorted(solution.gen(40), reverse=True)[0] == 39
    assert "".join(map(str, solution.gen(3))) == "012"


def test_builtins_that_take_plain_items_whole_take_them_in_chunks():
    before = requests()
    assert set(solution.gen(2000)) == set(range(2000))
    assert sum(solution.gen(2000)) == sum(range(2000))
    assert max(solution.gen(2000)) == 1999
    assert requests() - before < 40  # one request per item before
    before = requests()
    for _ in range(30):  # (3.11 specializes a call made a few times: it then runs elsewhere)
        assert set(solution.gen(100)) == set(range(100))
    assert requests() - before <= 30 * 4  # the call, and chunks of 16, 64, 256 items


def test_a_call_handed_straight_to_a_whole_consumer_brings_its_first_chunk():
    before = requests()
    for _ in range(30):  # (3.11 specializes a call made a few times: it then runs elsewhere)
        assert list(solution.gen(10)) == list(range(10))
        assert set(solution.gen(10)) == set(range(10))
        assert sorted(solution.gen(10))[-1] == 9
    assert requests() - before == 90  # one exchange each: the call and its items (two before)
    with pytest.raises(ValueError, match="at 3"):
        list(solution.failing(3))
    # Where the tests' code runs between the call and the consumer, nothing is read early.
    solution.reset()
    g = solution.gen(5)
    assert solution.count() == 0
    assert list(g) == [0, 1, 2, 3, 4] and solution.count() == 5
    solution.reset()

    def shadowed():
        list = lambda it: solution.count()  # noqa: E731 - a name that is not the builtin now
        return list(solution.gen(5))

    assert shadowed() == 0
    # An iterator the tests already hold may have items kept here: no chunk comes with it.
    it = solution.kept_iterator(10)
    assert next(it) == 0
    assert tuple(solution.kept_iterator()) == tuple(range(1, 10))


def test_builtins_that_stop_early_or_call_back_take_items_one_by_one():
    solution.reset()
    assert any(solution.gen(100)) and solution.count() == 2  # 0, then 1: true
    solution.reset()
    seen = set(map(lambda i: (i, solution.count()), solution.gen(30)))
    assert seen == {(i, i + 1) for i in range(30)}
    solution.reset()
    assert min(solution.gen(30), key=lambda i: -solution.count()) == 29


def test_items_are_taken_as_they_were_yielded():
    assert list(solution.same_list(3)) == [[0], [0, 1], [0, 1, 2]]
    got = list(solution.values())  # (in a chunk: the plain ones as they are, the rest encoded)
    assert got[:4] == [2**53 - 1, -(2**53) + 1, 2**53, -(2**53)]
    assert [type(v).__name__ for v in got] == [
        "int", "int", "int", "int", "bool", "int", "float", "float", "str", "NoneType",
        "Text", "tuple", "bytes", "bool", "int",
    ]  # fmt: skip
    assert str(got[7]) == "-0.0" and got[10] == "t" and got[11:13] == [(1, 2), b"b"]
    assert got[14] == 10**5000


def test_the_end_of_a_chunk_raises_where_it_did():
    got = []
    with pytest.raises(ValueError, match="at 5"):
        got.extend(solution.failing(5))
    assert got == [0, 1, 2, 3, 4]


def test_laziness_is_kept_where_a_test_can_see_it():
    solution.reset()
    g = solution.gen(100)
    assert next(g) == 0 and solution.count() == 1
    for x in g:
        assert solution.count() == x + 1
        if x == 10:
            break
    assert solution.count() == 11
    assert next(g) == 11 and solution.count() == 12


def test_callbacks_during_a_chunk_see_the_state_of_their_item():
    solution.reset()
    seen = []
    assert list(solution.calling_back(lambda i: seen.append((i, solution.count())), 50))
    assert seen == [(i, i + 1) for i in range(50)]


def test_the_tests_iterators_are_read_only_as_far_as_the_solution_reads():
    pulled = []

    def numbers():
        for i in range(1000):
            pulled.append(i)
            yield i

    it = numbers()
    assert solution.first(it) == 0
    assert pulled == [0] and next(it) == 1
    before = requests()
    assert solution.take_all(numbers()) == list(range(1000))
    assert requests() - before < 30  # its list() took them in chunks


COPIES_ITERTOOLS = sys.version_info < (3, 12)  # (readahead.py: their copies are deprecated)


def test_the_tests_pure_iterators_are_read_ahead_under_next():
    before = requests()
    assert solution.walk(iter(range(3000))) == 3000
    assert solution.walk(iter([(i, str(i)) for i in range(3000)])) == 3000
    assert solution.walk(reversed("x" * 3000)) == 3000
    assert requests() - before < 40  # one request per item before
    before = requests()
    assert solution.walk(itertools.permutations(range(6))) == 720
    assert solution.walk(itertools.product("ab", repeat=9)) == 512
    assert (requests() - before < 30) == COPIES_ITERTOOLS


def test_what_the_solution_did_not_use_stays_in_the_tests_iterator():
    it = iter(range(100))
    assert solution.first(it) == 0 and next(it) == 1
    assert solution.take(it, 5) == [2, 3, 4, 5, 6] and next(it) == 7
    values = [1, 2, 3]
    it = iter(values)
    assert solution.take(it, 2) == [1, 2]
    values.append(4)  # a list iterator reads the list as it is when asked
    assert list(it) == [3, 4]
    it = iter(values)
    assert solution.walk(it) == 4
    values.append(5)  # ... and once it ended, it stays ended
    assert list(it) == []
    perms = itertools.permutations("abc")
    assert solution.take(perms, 2) == [("a", "b", "c"), ("a", "c", "b")]
    assert next(perms) == ("b", "a", "c") and len(list(perms)) == 3
    counter = itertools.count(10)
    assert solution.take(counter, 3) == [10, 11, 12] and next(counter) == 13
    mixed = [[1], (2, 3.5), 4.5, None, 1 << 60, ("x", 1 << 60), frozenset({1})]
    assert solution.take(iter(mixed), 7) == mixed  # items as they are, whichever encoding


def test_the_tests_code_sees_its_iterator_where_the_solution_left_it():
    it = iter(range(10))
    pairs = solution.alternate(it, lambda: next(it, None))
    assert pairs == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    it = iter(range(50))
    got, seen = solution.take_then_call(it, 3, lambda: next(it))
    assert got == [0, 1, 2] and seen == 3 and next(it) == 4


def test_the_solution_copies_the_tests_range_and_itertools_iterators():
    before = requests()
    assert solution.walk(iter(range(100000))) == 100000
    assert solution.walk(reversed(range(5000))) == 5000
    assert solution.take_all(iter(range(50000))) == list(range(50000))
    assert requests() - before == 6  # the call and its copy's recipe (chunks: over 100 each)
    if not COPIES_ITERTOOLS:
        return
    assert solution.nth(iter(range(3)), 1) == 1  # (its first call asks for the function too)
    before = requests()
    assert solution.nth(itertools.permutations(range(40), 4), 1000000) == (18, 9, 10, 1)
    assert solution.take_all(itertools.product("ab", range(3), repeat=4)) == list(
        itertools.product("ab", range(3), repeat=4)
    )
    assert solution.walk(itertools.combinations_with_replacement("abcdef", 5)) == 252
    assert solution.take(itertools.repeat((1, "x"), 30), 30) == [(1, "x")] * 30
    assert requests() - before == 8  # (chunks: a thousand)


def test_a_copied_iterator_is_where_the_solution_left_it_whenever_the_tests_look():
    for make in (lambda: iter(range(10)), lambda: itertools.permutations("abcdefghij", 1)):
        expected, it = list(make()), make()
        pairs = solution.alternate(it, lambda: next(it, None))  # the tests take every other
        assert pairs == [tuple(expected[i : i + 2]) for i in range(0, 10, 2)]
    it = itertools.count(5)
    assert solution.take_then_call(it, 3, lambda: next(it)) == ([5, 6, 7], 8)
    it = itertools.combinations(range(6), 3)
    got, seen = solution.take_then_call(it, 3, lambda: next(it))
    assert got == [(0, 1, 2), (0, 1, 3), (0, 1, 4)] and seen == (0, 1, 5)
    assert next(it) == (0, 2, 3) and len(list(it)) == 15
    it = itertools.product(range(3), repeat=2)
    assert solution.walk(it) == 9 and next(it, "end") == "end"  # ended stays ended
    it = iter(range(5))
    assert solution.nth(it, 2) == 2 and list(it) == [3, 4]


def test_only_immutable_plain_iterators_are_copied_and_only_by_the_tested_side():
    readahead = sys.modules["_rollouts_readahead"]
    assert readahead.recipe(iter([1, 2])) is None  # a list can change: read ahead instead
    assert readahead.recipe(iter((1, 2))) is None  # (its items would all go at once)
    assert readahead.recipe(itertools.permutations([[1], [2]])) is None  # shared items
    assert readahead.recipe(itertools.repeat([1])) is None
    assert readahead.recipe(map(abs, range(3))) is None
    perms = itertools.permutations([[1], [2]])
    assert solution.take(perms, 2) == [([1], [2]), ([2], [1])] and next(perms, None) is None
    ep = sys.modules["_rollouts_trusted"]._endpoint
    refused = sys.modules["_rollouts_codec"].ProtocolError
    memo = sys.modules["_rollouts_codec"].Memo(records=ep)
    with pytest.raises(refused):  # the tests' side makes nothing from the tested side's word
        ep.decoded_chunk({"k": [], "p": 1, "b": ["count", [0], None]}, memo)


def test_a_count_of_items_of_a_copy_is_checked_against_the_iterator():
    ep = sys.modules["_rollouts_trusted"]._endpoint
    refused = sys.modules["_rollouts_codec"].ProtocolError
    memo = sys.modules["_rollouts_codec"].Memo(records=ep)
    for forged, where in (([11, False], None), ([3, True], 5), ([1 << 70, False], 1)):
        it = iter(range(10))
        assert solution.take(it, 1) == [0]
        oid = ep.export_ids[id(it)]
        assert ep._recipe(it, memo, {})  # (as a peek asked now would)
        with pytest.raises(refused):
            ep._advance_used({"ra": [[oid, *forged]]})
        assert next(it, None) == where  # (a protocol error ends the run; as far as it got)
    it = iter(range(10))
    assert solution.take(it, 1) == [0]
    assert ep._recipe(it, memo, {})
    ep._advance_used({"ra": [[ep.export_ids[id(it)], 4, False]]})
    assert next(it) == 5


def test_an_iterator_that_runs_code_is_never_read_ahead():
    pulled = []

    def numbers():
        for i in range(100):
            pulled.append(i)
            yield i

    assert solution.take(numbers(), 3) == [0, 1, 2] and pulled == [0, 1, 2]
    del pulled[:]
    mapped = map(lambda i: pulled.append(i) or i, range(100))
    assert solution.take(mapped, 3) == [0, 1, 2] and pulled == [0, 1, 2]
    del pulled[:]
    got, seen = solution.take_then_call(numbers(), 4, lambda: list(pulled))
    assert seen == [0, 1, 2, 3]
    before = requests()
    assert solution.walk(numbers()) == 100
    assert requests() - before == 102  # the call, and one request per item and the end

    class Items(list):
        pass

    class Thing:
        pass

    readahead = sys.modules["_rollouts_readahead"]
    assert readahead.clone(iter(Items([1, 2]))) is None  # a subclass's methods are code
    assert readahead.clone(numbers()) is None and readahead.clone(map(abs, [1])) is None
    assert readahead.clone(zip([1], [2])) is None and readahead.clone(iter({1: 2})) is None
    assert readahead.take(readahead.clone(iter([1, Thing(), 3])), 10) == ([1], False)


def test_a_routines_parameters_that_are_not_facts_are_refused():
    references = sys.modules["_rollouts_references"]
    refused = sys.modules["_rollouts_codec"].ProtocolError
    fn = solution.take  # (a proxy whose reference told its parameters: take(it, n))
    assert [p.name for p in inspect.signature(fn).parameters.values()] == ["it", "n"]
    forged = (
        "x", [[["a", 9]], False], [[["a b", 1]], False], [[["a", 1, [{"x": 1}]]], False],
        [[["a", 1, 5]], False], [[["a", 1]], 1], [[["a", 1, [[1], "list"]]], False],
        [[["a", 1, [[[1]], "tuple"]]], False],
    )  # fmt: skip
    for facts in forged:
        with pytest.raises(refused):
            references._set_routine_names(fn, {"p": facts})


def test_a_count_of_used_items_is_checked_against_what_was_read_ahead():
    ep = sys.modules["_rollouts_trusted"]._endpoint
    refused = sys.modules["_rollouts_codec"].ProtocolError
    it = iter(range(10))
    assert solution.take(it, 1) == [0]
    for forged in ([[ep.export_ids.get(id(it), 1), 1, False]], [[1, 1, 1]], [["x", 0, False]], {}):
        with pytest.raises(refused):
            ep._advance_used({"ra": forged})  # (nothing was read ahead since the last message)
    held = ({"ho": ["x"]}, {"ho": {}}, {"hk": {}}, {"hk": [[1, 1]]}, {"hk": [[1, -2, False]]})
    held += ({"hk": [[1, 1 << 63, False]]}, {"hk": [[1, 33, False]]}, {"hk": [[1, 1, 0]]})
    for forged in held:
        with pytest.raises(refused):
            ep._advance_used(forged)
    assert next(it) == 1


def test_items_read_ahead_outlast_callbacks_that_leave_the_iterator_as_it_was():
    before = requests()
    assert solution.each(iter(list(range(1000))), lambda x: x + 1) == list(range(1, 1001))
    assert solution.each(iter(range(1000)), lambda x: x) == list(range(1000))
    assert requests() - before < 2200  # a callback per item, and a few asks for items (4000)
    it = solution.listed(1000)
    before = requests()
    assert [solution.same(x) for x in it] == list(range(1000))
    assert requests() - before < 1100  # (2000: each item asked for again after the call)


def test_items_of_an_iterator_the_solution_left_alone_are_not_set_aside_again():
    ep = sys.modules["_rollouts_trusted"]._endpoint
    heard = []
    advance = ep._advance_used

    def spy(msg):
        heard.append(msg.get("ho"))
        return advance(msg)

    ep._advance_used = spy
    try:
        it = iter(list(range(100)))
        assert solution.take_then_call(it, 2, lambda: 7) == ([0, 1], 7)
        answered = len(heard)
        # Set aside at the callback (and kept: unchanged), and at the answer, the message
        # after their last use...
        assert heard[-2] is not None and heard[-1] is not None
        for _ in range(3):
            solution.helper()
    finally:
        del ep._advance_used
    assert len(heard) > answered and heard[answered:] == [None] * (len(heard) - answered)
    assert next(it) == 2  # ...and at no message after it


@pytest.mark.parametrize("take", [False, True])
def test_items_read_ahead_of_a_list_never_outlast_its_becoming_a_share(take):
    """The solution walks the tests' list iterator, and from a callback the tests hand it that
    very list, which it keeps (a share: each side changes its own copy, and the change goes with
    its next message); then it changes the list. Items read ahead of it before must not serve
    it after (neither kept across the answer that made the share, nor used in that call: the
    tests' side says they hold no more), or its next item is the one from before its change."""
    items = [1, 2, 3, 4, 5]
    keep = solution.keep_list  # (bound first: no getattr goes between the callback's messages)

    def fn(x):
        return keep(items, take) if x == 1 else None

    # It changes the item its loop takes next (the call with `take` took item 1 itself).
    got = solution.walk_changing(fn, iter(items), 2 if take else 1)
    if take:
        assert got == [2, 1, None, 99, None, 4, None, 5] and items == [1, 2, 99, 4, 5]
    else:
        assert got == [None, 1, None, 99, None, 3, None, 4, None, 5] and items == [1, 99, 3, 4, 5]


def test_items_set_aside_outlast_the_answer_of_a_generator_that_calls_back_per_item():
    """A generator of the solution that walks the tests' list and calls back into the tests
    for each item, taken one `next()` at a time (`functools.reduce`: more-itertools'
    `before_and_after` under a test's reduce): between two of its takes go the callback and
    the answer with the item, and what was set aside at the callback outlasts that answer, so
    an item costs its `next()` and its callback, not a third exchange to ask for it again."""
    seen = []

    def keep(x):
        seen.append(x)
        return True

    before = requests()
    assert functools.reduce(lambda a, b: a + b, solution.kept(keep, iter(list(range(1000))))) == (
        499500
    )
    assert seen == list(range(1000))
    assert requests() - before < 2200  # (3000 when each item was asked for again)


def test_keyword_names_arrive_as_they_were_given():
    class Name(str):
        pass

    assert solution.key_kinds(**{Name("a"): 1}, b=2) == ["Name", "str"]


def test_a_forked_process_does_not_use_its_parents_channel():
    """Either side's fork (multiprocessing's, the solution's) is refused the channel, and the
    parent's calls go on."""
    assert solution.in_a_fork(lambda: 1) == 3  # the solution's child calls the tests back
    pid = os.fork()
    if pid == 0:
        try:
            solution.helper()
        except Exception as e:
            os._exit(3 if "forked" in str(e) else 4)
        os._exit(4)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
    assert solution.helper() in ("old", "new") and solution.in_a_fork(lambda: 1) == 3


def test_a_module_function_is_one_exchange_per_call():
    solution.helper()
    before = requests()
    for _ in range(50):
        assert solution.helper() == "old"
    assert requests() - before == 50  # 100 before: a getattr, then the call


def test_a_rebound_function_is_seen_at_once(monkeypatch):
    assert solution.helper() == "old"
    assert solution.rebind_and_call(lambda: solution.helper()) == "new"  # in the callback
    assert solution.helper() == "new"
    monkeypatch.setattr(solution, "helper", lambda: "patched")
    assert solution.helper() == "patched"


def test_the_solution_draws_from_the_tests_stream():
    random.seed(7)
    expected = random.Random(7).random()
    assert solution.draw() == expected
    random.seed(7)
    assert solution.draw() == expected


def test_the_solution_asks_for_the_tests_random_state_only_when_it_moved():
    random.seed(11)
    solution.draw()
    before = requests()
    drawn = [solution.draw() for _ in range(20)]
    assert requests() - before == 20  # the calls alone (their state went once)
    stream = random.Random(11)
    assert drawn == [stream.random() for _ in range(21)][1:]  # the solution's copy goes on
    random.random()  # the tests draw: the solution draws from where they are now
    now = random.Random()
    now.setstate(random.getstate())
    assert solution.draw() == now.random()
    random.seed(11)  # ... and where they re-seeded to a state it had
    assert solution.draw() == random.Random(11).random()
    seed(11)  # (by the name they took before the solution's import)
    assert solution.draw() == random.Random(11).random()


LIMIT = 3


def test_a_method_called_at_once_is_one_exchange_and_the_same_call():
    box = solution.Box()
    before = requests()
    for i in range(50):
        assert box.bump() == i + 1
    assert box.bump(by=LIMIT) == 53 and box.bump(LIMIT, ) == 56
    assert requests() - before == 52  # 104 before: a getattr, then the call
    assert box.handler(4) == 40 and box.doubler(4) == 8  # (its own function; a property's)
    made = box.factory()
    assert type(made) is collections.OrderedDict  # the attribute, called here as before
    with pytest.raises(AttributeError):
        box.missing()
    with pytest.raises(KeyError, match="inside"):
        box.fail()
    items = []
    box.attach(items)  # an argument the method keeps is shared, as a call's is
    box.add(1)
    box.add(2)
    assert items == [1, 2] and box.sink is items


def test_a_method_read_apart_from_its_call_is_read_first():
    box = solution.Box()
    bump = box.bump
    before = requests()
    assert bump() == 1 and requests() - before == 1  # the getattr went before, at its read
    assert box.bump(box.bump()) == 4  # (the outer read goes first, then the inner call)
    assert getattr(box, "bump")() == 5
    with pytest.raises(AssertionError) as failed:
        assert box.bump() == -1  # a failure's message shows the method, as pytest's would
    assert "bound method Box.bump of" in str(failed.value)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one processor: nothing to share")
def test_a_call_waits_on_one_processor_and_runs_on_all():
    mine = os.sched_getaffinity(0)

    def meanwhile(pid):  # (a callback: the tested process waits for its answer)
        return sorted(os.sched_getaffinity(0)), sorted(os.sched_getaffinity(pid))

    for _ in range(20):
        running, (ours, theirs_waiting) = solution.processors(meanwhile)
        assert running == len(mine)  # the tested code runs with all its processors
        assert len(ours) == 1 and theirs_waiting == ours and ours[0] in mine  # both wait there
        assert os.sched_getaffinity(0) == mine  # held while it waited, free again after
    assert solution.processors_of_a_child_and_a_thread() == (len(mine), len(mine))


def test_a_thread_of_the_solution_that_draws_never_asks():
    solution.start_drawing()  # (last: it draws until the tested process ends)
    for i in range(300):
        random.seed(i)
        assert solution.count() >= 0
'''


def test_round_trips_are_fewer_and_nothing_observable_changes(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "verifier")
    layout.passes({"solution.py": SOLUTION}, {"test_round_trips.py": TESTS}, 34)
