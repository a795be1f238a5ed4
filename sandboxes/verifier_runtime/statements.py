"""Where the tests stand when an answer comes (the trusted side's part of an endpoint).

A value the tested side sends again for an object the tests hold (based.py: the solution's
`class Stack(list)` after `s.push(2)`) is taken up at once only where a test's own
instruction made that change (`called_by_a_test`), else between two of the tests' statements
(`moment`): never while C code of the tests' check may be reading the object itself.

Standard library only, Python >= 3.8.
"""

import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
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
        """Where the tests stand: (id, statement) of each of their frames below the runner's
        call of the test (a comprehension's and the test's own, say), the statement told by
        its first line (`_statement`): a value that came while one statement ran is not taken
        up until the tests are at another (a check that reads a copy and then the object,
        `sorted(got, key=solution.rank) == got`, reads both as they were)."""
        frame, at = stops.outside(sys._getframe(1)), set()
        for _ in range(_MOMENT_DEPTH):
            if frame is None or _runner(frame) in CALLS_A_TEST:
                break
            if self.read_by_tests(frame):
                at.add((id(frame), _statement(frame)))
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
        if caller is None or _runner(caller) not in CALLS_A_TEST:
            return False
        target = args[0] if args else None
        name = args[1] if op == "callattr" and len(args) > 1 else target
        return stops.makes(frame, op, target, name)


def _runner(frame):
    return frame.f_globals.get("__name__"), frame.f_code.co_name


def _statement(frame):
    """Where the statement `frame` stands in starts (of a compound one: its header), as the
    tests' file's syntax tree says, the instruction's column telling two statements on one line
    apart where the interpreter keeps columns (3.11); its line where that cannot be read."""
    path = frame.f_code.co_filename
    spans = _spans.get(path)
    if spans is None:
        if len(_spans) >= _FILES_KEPT:
            _spans.clear()
        spans = _spans[path] = _statement_spans(path)
    line, col = _position(frame)
    found = None
    for start, end in spans.get(line, ()):
        if start[0] < line or col is None or start[1] <= col:
            if end[0] > line or col is None or col <= end[1]:
                found = start if found is None or start > found else found
    return found or (line, 0)


def _position(frame):
    """(line, column) of the instruction `frame` stands at; column None where unknown."""
    code = frame.f_code
    positions = _positions.get(code)
    if positions is None and hasattr(code, "co_positions"):
        if len(_positions) >= _FILES_KEPT * 16:
            _positions.clear()
        positions = _positions[code] = list(code.co_positions())
    if positions:
        at = frame.f_lasti // 2
        if 0 <= at < len(positions) and None not in positions[at][:3:2]:
            return positions[at][0], positions[at][2]
    return frame.f_lineno, None


def _statement_spans(path):
    """line -> [(start, end)] of the statements (a compound one's header) over that line, each
    a (line, column) pair."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    spans = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body:  # (a header ends where its body starts)
            first = body[0]
            end = (first.lineno, first.col_offset - 1)
            if first.lineno > node.lineno:
                end = (first.lineno - 1, 1 << 30)
        else:
            end = (node.end_lineno, node.end_col_offset)
        start = (node.lineno, node.col_offset)
        for line in range(start[0], end[0] + 1):
            spans.setdefault(line, []).append((start, end))
    return spans


_spans = {}  # a file's path -> `_statement_spans`
_positions = {}  # code -> its instructions' positions
_FILES_KEPT = 256
