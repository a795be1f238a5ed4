"""Where the tests stand when an answer comes (the trusted side's part of an endpoint).

A value the tested side sends again for an object the tests hold (based.py: the solution's
`class Stack(list)` after `s.push(2)`) is taken up at once only where a test's own
instruction made that change (`called_by_a_test`), else between two of the tests' statements
(`moment`): never while C code of the tests' check may be reading the object itself.

Standard library only, Python >= 3.8.
"""

import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
rpc = _load("rpc")
stops = _load("stops")

# The runners' functions that call a test or a fixture themselves (`testfunction(**testargs)`,
# unittest's `method()`): no C code runs between them and it.
CALLS_A_TEST = frozenset(
    (
        ("_pytest.python", "pytest_pyfunc_call"),
        ("_pytest.fixtures", "call_fixture_func"),
        ("unittest.case", "_callTestMethod"),
    )
)
_MOMENT_DEPTH = 64  # the tests' frames a `moment` reads, innermost first


class Statements:
    """`asking`: (request, arguments) being asked, innermost last (the endpoint keeps it)."""

    def tests_code(self, module):
        """Whether module `module` (a name) is of the tests' own files (trusted.py)."""
        raise NotImplementedError

    def read_by_tests(self, frame):
        return self.tests_code(frame.f_globals.get("__name__"))

    def moment(self):
        """Where the tests stand: (id, instruction) of each of their frames."""
        frame, at = stops.outside(sys._getframe(1)), set()
        for _ in range(_MOMENT_DEPTH):
            if frame is None:
                break
            if self.read_by_tests(frame):
                at.add((id(frame), frame.f_lasti))
            frame = stops.outside(frame.f_back)
        return at

    def called_by_a_test(self):
        """Whether the frame that made the request being answered (past ours) is the tests',
        the runner's own call of a test or fixture made it, and its own instruction made the
        request (a call of that very object, an assignment, an operator in place): a test's
        own statement, not a tests' `__eq__` or key function that C code called
        (`expected.issubset(got)`, `sorted(got, key=solution.rank)`)."""
        if not self.asking:
            return False
        op, args = self.asking[-1]
        frame = stops.outside(sys._getframe(1))
        if frame is None or not self.read_by_tests(frame):
            return False
        caller = stops.outside(frame.f_back)
        runner = (caller.f_globals.get("__name__"), caller.f_code.co_name) if caller else None
        if runner not in CALLS_A_TEST:
            return False
        target = args[0] if args else None
        if op == "callattr":
            name = args[1] if len(args) > 1 else None
        elif op == "op":
            name = target  # (the operator's name)
        else:  # (a routine proxy's name came with its reference: references.py)
            name = vars(target).get("__name__") if isinstance(target, rpc.RemoteObject) else None
        return stops.makes(frame, op, target, name)
