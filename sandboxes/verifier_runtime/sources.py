"""What the tests' process reads of a workspace module's source: the agent's text, or a report.

/app holds a stub for each Python module of the workspace (view.py), and it must stay the stub:
an import, an exec of the file, `python3 /app/NAME.py` all run what the path holds, and the
agent's code must never run in this process. So the agent's text reaches the tests only where
reading it cannot run it:

- Python's source lookup answers with it: linecache (so `inspect.getsource`, `getsourcelines`,
  `findsource`, doctest, tracebacks) and the stub module's loader (`get_source`). The text is
  view.py's copy, taken before any of the agent's code ran, where the tested code cannot write.
- A compile of source whose statements are that text's (`exec(inspect.getsource(solution))`,
  `compile()` of its parsed tree) is refused: only `ast.parse`, which builds a tree and runs
  nothing, may take it.

Every other read of a stub's bytes reads the stub (open(), pathlib, os.open, a loader's
`get_data` outside an import; a program handed the stub's path, `grep`, `cat`, a linter):
this process's audit hook reports it as `stub_read`, and reward.py flags a positive reward
with one `unguarded`, so a source check that passed on the stub's text is never a silent 1
and a task whose oracle reads a stub is graded in the calibration fallback (where /app holds
the agent's files). What no hook here sees: a program that finds a stub by itself (a folder
argument, `cd /app && cat *.py`), and processes that are not this one's children.

Text the tested process chose is not run here either. Its answers that are text (what `repr`,
`str`, `format` or a method return) and the docstrings it sends are kept (`heard`), and a
compile of exactly such a text (`eval(repr(x))`, `exec(solution.code())`), or of a doctest
example from such a docstring (`doctest.run_docstring_examples(solution.fn)`, a
`DocTestFinder` on the agent's module), is refused: in one process that code would be the
agent's anyway, here it would run with the tests' rights. Two kinds of such text run nothing
of the tests': a literal (`eval(repr([1, 2]))`), and an expression that only builds values
through the tested process (`eval(repr(p)) == p` for a `Point(1, 2)`): constants, containers,
and calls or non-underscore attributes of names that are, where the tests evaluate it, the
tested process's objects (a class of the solution, its module), or builtin constructors of plain
data (int, str, list, ...); both are evaluated. A task whose oracle needs more fails
calibration and is graded in the fallback (`doctest.testmod(solution)` is no such compile: it
runs the module's doctests in the tested process, reruns.py). What is not seen: a text the
tests build from pieces the tested process sent, or that it sent inside a container.

Standard library only: this runs under the task image's Python.
"""

import ast
import importlib.machinery
import importlib.util
import io
import linecache
import os
import re
import sys
import threading
import warnings

_texts = {}  # a stub's path (as given and resolved) -> the agent's text
_basenames = set()  # a cheap first test before a path is resolved
_tests_root = [None]  # the tests' folder
_tests_dumps = []  # [the dumps of their files' top-level statements], once asked
# Each parsed text's top-level statements and all its definitions, not inert, by `_key`: their
# trees until a compiled statement of that key comes, then their `ast.dump`s (a dump is a
# tenth of a millisecond per kilobyte of source, and most keys are never asked: the tests' own
# functions and classes have names of their own). A text is parsed only once a compiled
# statement may be one of its own (`_parse_for`).
_statements = {}  # key -> [trees not yet dumped, set of dumps, whether one could not be]
_pending = []  # (text, whether it is ASCII) of the agent's texts not parsed yet (`_parse_for`)
_all_lines = []  # [the stripped lines of the texts pending when first asked] (`_pending_lines`)
_lock = threading.Lock()  # `_pending` and `_statements` (`_checked`)
_holding = threading.local()
_dump = ast.dump  # (bound once: a test's patch of ast.dump is not asked)
# (bound once too: a test's patch of ast.parse, compile or warnings is not ours)
_compile = compile
_AST_ONLY = ast.PyCF_ONLY_AST
_AST_PARSE_CODE = ast.parse.__code__
_catch_warnings, _simplefilter = warnings.catch_warnings, warnings.simplefilter
_warnings = warnings
_first_lines = set()  # their first lines, stripped: a cheap first test of a compiled string
_reported = set()
_busy = threading.local()  # our own ast.parse raises "compile" too
_report = None
_of_tested = None  # whether an object stands for one of the tested process (install)
_heard = {}  # text or bytes the tested process chose -> None, oldest first (dicts keep order)
_heard_size = 0
_HEARD_CAP = 64 << 20  # characters kept; past it the oldest go

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# What holds statements (`_definitions`): a statement, an `except` clause, a `case` (3.10+).
_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler) + (
    (ast.match_case,) if hasattr(ast, "match_case") else ()
)
_PROGRAM_EVENTS = {
    "subprocess.Popen": (1, 2),  # (executable, args, cwd, env): where argv and cwd are
    "os.exec": (1, None),
    "os.posix_spawn": (1, None),
    "os.spawn": (2, None),
    "os.system": (0, None),
}
_AUDITED = frozenset(("open", "compile", *_PROGRAM_EVENTS))  # (the events `_audit` acts on)
_LINES = re.compile(r"\r\n|\r|\n")
_TOKEN = re.compile(r"[\s'\"=;|&<>()`]+")
_PYTHON = re.compile(r"^python[0-9.]*$")
# Where the import system reads a file to run it (the caller of open and its caller): running
# a stub is what a stub is for.
_RUNS = {
    ("get_data", "get_code"),  # importlib's SourceLoader: import, exec_module, reload
    ("_get_code_from_file", None),  # runpy.run_path
    ("_read_directory", None),  # zipimport, asking whether the path is an archive
}


def install(manifest, report, of_tested):
    """Serve the agent's texts of `manifest["sources"]` ({stub: copy}) and watch this process
    for other reads of the stubs, reporting them with `report(event, **fields)`.
    `of_tested(obj)`: whether `obj` stands for an object of the tested process (a proxy, a
    stub module). Once per process: an audit hook cannot be removed."""
    global _report, _of_tested
    if _report is not None:
        return
    _report, _of_tested = report, of_tested
    _tests_root[0] = manifest.get("tests")
    for stub, copy in (manifest.get("sources") or {}).items():
        text = None  # no text (an extension module, one that does not decode): still a stub
        try:
            with open(copy, "rb") as f:
                text = importlib.util.decode_source(f.read())
        except (OSError, TypeError, SyntaxError, UnicodeDecodeError):
            pass
        for path in {os.path.abspath(stub), os.path.realpath(stub)}:
            _texts[path] = text
            _basenames.add(os.path.basename(path))
            if text is not None:
                linecache.cache[path] = (len(text), None, _lines_of(text), path)
        if text is not None:
            _pending.append((text, text.isascii()))
    # linecache drops nothing whose mtime is None (checkcache), but clearcache() does: the
    # next lookup of a stub is answered here, not by reading the stub.
    original = linecache.updatecache

    def updatecache(filename, module_globals=None):
        text = text_of(filename)
        if text is None:
            return original(filename, module_globals)
        lines = _lines_of(text)
        linecache.cache[filename] = (len(text), None, lines, filename)
        return lines

    linecache.updatecache = updatecache
    sys.addaudithook(_audit)


def _lines_of(text):
    """The text's lines as the parser numbers them and linecache reads a file: ended by "\\n"
    alone (`decode_source` made every line end one). `str.splitlines` ends one at a form feed,
    "\\x1c" or "\\u2028" too, which shifted what `inspect.getsource` of a class gave to lines
    of the agent's choosing, run by an `exec` of it here as none of its statements."""
    return io.StringIO(text, newline="\n").readlines()


def _parse_for(statements):
    """Parse the agent's texts not parsed yet that may hold one of `statements` (a compiled
    tree's), adding theirs to `_statements`. Most verifications compile nothing after the
    stubs are in place but the tests' own modules, whose statements name what no text of the
    agent's holds: parsing every text at the start cost a verification up to 0.1 CPU-s (a
    package with data tables, as idna's). A text stays unparsed only where it cannot hold any
    of them: it is ASCII, so every identifier of its tree is written in it as it is (a
    non-ASCII identifier is normalised by the parser), and each statement has an identifier
    it does not contain (`_identifiers`). Anything else parses it, as install did."""
    if not _pending:
        return
    try:
        names = [_identifiers(s) for s in statements]
    except Exception:  # noqa: BLE001 - closed: every text is parsed
        names = [[]]
    left = []
    for text, ascii in _pending:
        if ascii and all(ns and not all(n in text for n in ns) for ns in names):
            left.append((text, ascii))
            continue
        try:
            tree = _parse_quietly(text)
        except (SyntaxError, ValueError):
            continue  # (as install did: a text that does not parse holds no statement)
        lines = _LINES.split(text)  # as the parser counts them (not str.splitlines)
        for node in tree.body + _definitions(tree):
            if not _inert(node):
                _statements.setdefault(_key(node), [[], set(), False])[0].append(node)
                _first_lines.add(lines[node.lineno - 1].strip())
    _pending[:] = left


def _checked(check, *args):
    """`check(*args)` holding `_lock`. A compile asked for in the same thread meanwhile (by a
    finalizer the collector runs, a signal handler, a `repr` that `ast.dump` calls on a tree the
    tests built) is refused, not waited for: the lock is not re-entrant, and a check within a
    check would find `_pending` half done."""
    if getattr(_holding, "on", False):
        raise RuntimeError("a compile while the tests' process checks another one")
    with _lock:  # (released however the check ends, a signal's exception too)
        try:
            _holding.on = True
            return check(*args)
        finally:
            _holding.on = False


def _new_lock():
    global _lock
    _lock = threading.Lock()  # (a fork's child: another thread may have held it at the fork)


os.register_at_fork(after_in_child=_new_lock)


# What may make the parser warn: an escape that is not one (`"\d"`; in bytes, `\N`, `\u`,
# `\U` too), a number run into a keyword (`1if`).
_MAY_WARN = re.compile(r"\\[^\\'\"abfnrtv0-7x\r\n]|[0-9](?:and|else|for|if|in|is|not|or)\b")


def _parse_quietly(text):
    """The tree of the agent's `text`, with the parser's warnings ignored: a test that turns
    warnings into errors would make the text not parse, and so hold no statement, and a test's
    record of warnings would get the agent's (this runs during a test, at a compile). Ignoring
    them changes the warnings filters of the whole process for a moment (another thread's
    warning meanwhile is lost), so only for a text that may warn; a SyntaxError of any other
    is asked again that way (a warning `_MAY_WARN` did not foresee). Our own parse raises the
    "compile" audit event too: `_busy` has the hook pass it by."""
    _busy.on = True
    try:
        if not _MAY_WARN.search(text):
            try:
                return _compile(text, "<unknown>", "exec", _AST_ONLY)
            except SyntaxError:
                pass
        with _catch_warnings(module=_warnings):
            _simplefilter("ignore")
            return _compile(text, "<unknown>", "exec", _AST_ONLY)
    finally:
        _busy.on = False


def _pending_lines():
    """A superset of the first lines of the pending texts' statements (made once, from the
    texts pending then; texts parsed before have theirs in `_first_lines`, which is asked
    too): every line of theirs, stripped, but the blank ones, which no statement starts on.
    (With the blank one, nearly every compiled string went on to a parse of its own. Fewer
    lines, by where a statement may start, missed statements a form feed in the indentation
    puts at the top level, or that follow a string ended on a line a `#` begins.)"""
    if not _all_lines:
        found = set()
        for text, _ in _pending:
            for line in _LINES.split(text):
                stripped = line.strip()
                if stripped:
                    found.add(stripped)
        _all_lines.append(found)
    return _all_lines[0]


# Where a tree holds an identifier as the parser read it, one name token each (not an import's
# dotted name, which may be spelt with spaces).
_IDENTIFIER_OF = {
    ast.Name: "id", ast.Attribute: "attr", ast.arg: "arg", ast.keyword: "arg",
    ast.FunctionDef: "name", ast.AsyncFunctionDef: "name", ast.ClassDef: "name",
}  # fmt: skip
_IDENTIFIERS_MAX = 16
_NODES_MAX = 4096  # (a table of constants in a test module holds none: not walked whole)


# The parser's own node classes (by id: a class's hash or equality could be anyone's code).
_NODE_CLASSES = {
    id(c) for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.AST)
}


def _identifiers(statement):
    """Some identifiers of `statement` (up to _IDENTIFIERS_MAX, the statement's own name
    first), each of which an equal statement holds too. Empty (then every text is parsed)
    where none was met among its first _NODES_MAX nodes, or where the tree is not made of the
    parser's own node classes and plain lists, as a tree the tests build by hand may not be:
    what `ast.dump` shows of such a tree (Python 3.13 leaves out a field equal to `[]`) need
    not be what a walk finds."""
    found, stack, seen = [], [statement], 0
    while stack and len(found) < _IDENTIFIERS_MAX and seen < _NODES_MAX:
        node = stack.pop()
        seen += 1
        cls = type(node)
        if id(cls) not in _NODE_CLASSES:
            return []
        own = node.__dict__
        if "_fields" in own:
            return []
        for name in cls._fields:
            value = own.get(name)
            if type(value) is list:
                children = value
            elif issubclass(type(value), ast.AST):
                children = [value]
            else:
                # (a name, a constant's value; or anything else a hand-built tree holds, whose
                # identifiers are left out: what is not walked names nothing here)
                continue
            for child in reversed(children):
                if issubclass(type(child), ast.AST):
                    stack.append(child)
        field = _IDENTIFIER_OF.get(cls)
        value = own.get(field) if field is not None else None
        if type(value) is str and value not in found:
            found.append(value)
    return found


def _definitions(tree):
    """Every function and class definition in `tree`, however deeply nested. A definition is a
    statement, and statements sit only in the statement lists of other statements (and of an
    `except` clause or a `case`), never inside an expression; so only those lists are walked,
    not the expressions, which in a module of data tables are nearly all of its nodes
    (`ast.walk` over idna's tables took half as long again as parsing them)."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        for _field, value in ast.iter_fields(node):
            if type(value) is not list:
                continue
            for item in value:
                if isinstance(item, _DEFS):
                    found.append(item)
                if isinstance(item, _HOLDS_STATEMENTS):
                    stack.append(item)
    return found


def heard(value):
    """Keep `value`, text or bytes the tested process sent (an answer, a docstring), so that
    compiling it here is refused (and unpickling it, pickles.py)."""
    global _heard_size
    if type(value) not in (str, bytes) or len(value) < 2 or value in _heard:
        return
    _heard[value] = None
    _heard_size += len(value)
    while _heard_size > _HEARD_CAP and _heard:
        oldest = next(iter(_heard))
        del _heard[oldest]
        _heard_size -= len(oldest)


def was_heard(value):
    """Whether the tested process sent `value`, text or bytes (an answer, a docstring)."""
    return value in _heard


def _runs_heard(source, filename, frame):
    """Whether compiling `source` runs text the tested process chose: the text itself, or an
    example of a doctest whose docstring is such a text (or the agent's module text)."""
    if not _heard and not _texts:
        return False
    if isinstance(source, bytes):
        if source in _heard and not _literal(source.decode("utf-8", "replace")):
            return True  # (bytes it answered: evaluated as text only when a literal)
        source = source.decode("utf-8", "replace")
    if isinstance(source, str) and source in _heard:
        return not (_literal(source) or _builds_through_tested(source, frame))
    if not (isinstance(filename, str) and filename.startswith("<doctest ")):
        return False
    for _ in range(4):  # DocTestRunner.__run compiles the example: its `test` is the DocTest
        if frame is None:
            return False
        test = frame.f_locals.get("test") if frame.f_globals.get("__name__") == "doctest" else None
        docstring = getattr(test, "docstring", None)
        if isinstance(docstring, str):
            return docstring in _heard or any(
                t is not None and docstring.strip() in t for t in _texts.values()
            )
        frame = frame.f_back
    return False


def _literal(source):
    """Whether `source` is a literal (a number, a string, containers of them): it runs nothing,
    so a test may evaluate what the tested code printed (`eval(repr([1, 2]))`)."""
    _busy.on = True  # our own parse raises "compile" too
    try:
        ast.literal_eval(source.strip())
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    finally:
        _busy.on = False


# Builtins that make plain data of their arguments: calling one with the tested process's
# values asks those values (their own dunders run there) and runs nothing of the tests'.
_CONSTRUCTORS = frozenset(
    id(f) for f in (int, float, complex, str, bytes, bool, tuple, list, dict, set, frozenset)
)
_DATA_NODES = (
    ast.Expression, ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Call,
    ast.keyword, ast.Name, ast.Attribute, ast.Load, ast.UnaryOp, ast.USub, ast.UAdd,
)  # fmt: skip


def _builds_through_tested(source, frame):
    """Whether `source` is an expression that only builds values through the tested process:
    constants and containers, calls and non-underscore attributes of names that are, in
    `frame` (where the tests evaluate it), objects of the tested process, and calls of
    builtin constructors of plain data. Every name must resolve there: one the tests would
    evaluate in a namespace of their own making is not judged, so not run."""
    if _of_tested is None or frame is None:
        return False
    _busy.on = True  # our own parse raises "compile" too
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    finally:
        _busy.on = False
    builtins = frame.f_globals.get("__builtins__", {})
    if not isinstance(builtins, dict):
        builtins = vars(builtins)
    missing = object()

    def resolve(name):
        for scope in (frame.f_locals, frame.f_globals, builtins):
            value = scope.get(name, missing)
            if value is not missing:
                return value
        return missing

    for node in ast.walk(tree):
        if not isinstance(node, _DATA_NODES):
            return False
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                return False
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and _of_tested(resolve(root.id))):
                return False  # attributes of the tested process's objects only
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, (ast.Name, ast.Attribute)):
                return False
        elif isinstance(node, ast.Name):
            value = resolve(node.id)
            if value is missing or not (id(value) in _CONSTRUCTORS or _of_tested(value)):
                return False
    return True


def _stub(path):
    """`path` resolved, when it is a stub's; else None."""
    if not isinstance(path, (str, bytes)):
        return None
    path = os.fsdecode(path)
    if os.path.basename(path) not in _basenames:
        return None
    for resolved in (os.path.abspath(path), os.path.realpath(path)):
        if resolved in _texts:
            return resolved
    return None


def text_of(path):
    """The agent's text of the stub at `path`; None when `path` is no stub or has no text."""
    stub = _stub(path)
    return None if stub is None else _texts[stub]


class TextLoader(importlib.machinery.SourceFileLoader):
    """A stub module's loader: it loads the stub, and its source is the agent's text."""

    def get_source(self, fullname):
        text = text_of(self.path)
        return text if text is not None else super().get_source(fullname)


def adopt(module):
    """Give the stub module `module` the agent's docstring, and a loader whose `get_source` is
    the agent's text."""
    spec = getattr(module, "__spec__", None)
    loader = getattr(spec, "loader", None)
    if type(loader) is not importlib.machinery.SourceFileLoader:
        return
    text = text_of(loader.path)
    if text is None:
        return
    spec.loader = TextLoader(loader.name, loader.path)
    module.__loader__ = spec.loader
    try:
        first = ast.parse(_first_statement(text))
        if not first.body:  # (3.11's tokenizer ends a line at a lone backslash: not one)
            raise SyntaxError("no statement")
        module.__doc__ = ast.get_docstring(first, clean=False)
    except (SyntaxError, ValueError):
        try:
            module.__doc__ = ast.get_docstring(ast.parse(text), clean=False)
        except (SyntaxError, ValueError):
            pass
    # Its examples are the agent's as its functions' docstrings are (sent by the tested
    # process, so heard): a doctest of them is refused here. The text holds them only as
    # written, escapes and all, so a search of the text missed them.
    heard(module.__doc__)


# Read for it at most: past them, the whole text (CPython 3.12.0 to 3.12.3 tokenize a long line
# in time that grows with its square).
_FIRST_STATEMENT_CHARACTERS = 1 << 13
_FIRST_STATEMENT_TOKENS = 1000


def _first_statement(text):
    """The lines of `text` up to the end of its first logical line: where they parse alone,
    their first statement is the text's, and so is the docstring (parsing a module of the
    agent's whole for it cost the tests' import of it some 0.2 ms per kilobyte). The whole
    text where that line is long (a table of data first): tokenizing it would cost more."""
    import tokenize  # (pytest's assertion rewriting has imported it already)

    read = []
    left = [_FIRST_STATEMENT_CHARACTERS]
    lines = io.StringIO(text).readline

    def readline():
        line = lines()
        left[0] -= len(line)
        read.append(line if left[0] >= 0 else "")
        return read[-1]

    try:
        for n, token in enumerate(tokenize.generate_tokens(readline)):
            if token.type == tokenize.NEWLINE and left[0] >= 0:
                return "".join(read[: token.end[0]])
            if n >= _FIRST_STATEMENT_TOKENS:
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    return text


def _stub_read(path, how):
    key = (path, how)
    if key not in _reported and len(_reported) < 20:
        _reported.add(key)
        _report("stub_read", path=path, how=how)


def _caller_runs_it(frame):
    first = frame.f_code.co_name if frame is not None else None
    back = frame.f_back if frame is not None else None
    second = back.f_code.co_name if back is not None else None
    return (first, second) in _RUNS or (first, None) in _RUNS


def _program_stub(argv, cwd):
    """The stub path a program is handed to read, if any: a stub among its arguments (or in a
    shell command's words) that is not the script a Python interpreter runs."""
    if isinstance(argv, (str, bytes)):
        argv = [argv]
    try:
        words = [w for a in argv for w in _TOKEN.split(os.fsdecode(a)) if w]
    except TypeError:
        return None
    cwd = os.fsdecode(cwd) if isinstance(cwd, (str, bytes)) else os.getcwd()
    before = None  # the last word that is not an option
    for word in words:
        stub = _stub(os.path.join(cwd, word))
        if stub is not None:
            if before is None or not _PYTHON.match(os.path.basename(before)):
                return stub
        if not word.startswith("-"):
            before = word
    return None


def _inert(node):
    """A statement that runs nothing of the agent's however it is run (and may well be the
    tests' own too): an import (a workspace module imports as its stub), `pass`, a constant."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass, ast.Global, ast.Nonlocal)):
        return True
    value = getattr(node, "value", None)
    if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)):
        names = getattr(node, "targets", None) or [getattr(node, "target", None)]
        plain = all(isinstance(t, ast.Name) for t in names if t is not None)
        return (value is None or isinstance(value, ast.Constant)) and plain
    return False


def _runs_text(source, caller):
    """Whether compiling `source` would make code of the agent's: a top-level statement that is
    one of its text's (a definition anywhere in it, as `inspect.getsource` gives one), not
    inert. `ast.parse` (the caller given) makes only a tree, which is checked if compiled."""
    if isinstance(source, (str, bytes)):
        if caller is not None and caller.f_code is _AST_PARSE_CODE:
            return False
        text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
        pending = _checked(_pending_lines) if _pending else ()
        stripped = [line.strip() for line in _LINES.split(text)]
        if not any(line in _first_lines or line in pending for line in stripped):
            return False
        try:
            tree = _parse_quietly(text)  # (its warnings are the compile's own to give)
        except (SyntaxError, ValueError):
            return False
    elif isinstance(source, ast.AST):
        tree = source
    else:
        return False
    body = getattr(tree, "body", None)
    if not isinstance(body, list):
        return False
    try:
        statements = [s for s in body if isinstance(s, ast.stmt) and not _inert(s)]
        # (texts parsed by one thread while another reads `_statements`: one at a time)
        return _checked(_agents_among, statements)
    except (TypeError, ValueError, AttributeError):
        return False  # a tree that cannot be read does not compile either


def _agents_among(statements):
    """Whether one of `statements` is one of the agent's texts' (the texts parsed first that
    may hold them). Where a text could not be read (its parse failed but for its syntax), the
    compile is refused: `_runs_text` lets a compile through on some errors of its own."""
    try:
        _parse_for(statements)
    except Exception as e:  # noqa: BLE001 - closed
        reason = "the agent's texts could not be read to check a compile: %r" % (e,)
        raise RuntimeError(reason) from None
    return any(_agents(s) and not _tests_own(s) for s in statements)


def _tests_own(statement):
    """Whether `statement` is also a top-level statement of one of the tests' own files: the
    tests' as much as the agent's (boltons' tests and its `ecoutils.py` both end `if __name__
    == '__main__': main()`, and refusing pytest's compile of such a test module failed the
    whole session's collection). Their files are parsed once, at the first such match."""
    if not _tests_dumps:
        _tests_dumps.append(_statements_of_tests(_tests_root[0]))
    try:
        return _dump(statement) in _tests_dumps[0]
    except Exception:  # noqa: BLE001 - as `_agents`: closed
        return False


_TESTS_READ = 1 << 22  # bytes of the tests' files read for that, at most


def _statements_of_tests(root):
    dumps, left = set(), _TESTS_READ
    if not isinstance(root, str):
        return dumps
    for folder, _dirs, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    data = f.read(left + 1)
                left -= len(data)
                if left < 0:
                    return dumps
                tree = _parse_quietly(importlib.util.decode_source(data))
                dumps.update(_dump(node) for node in tree.body)
            except Exception:  # noqa: BLE001 - a file that does not read or parse holds none
                continue
    return dumps


def _key(node):
    """What two equal statements share, cheap to read: the statement's kind and its name."""
    name = getattr(node, "name", None)
    return type(node).__name__, name if isinstance(name, str) else None


def _agents(statement):
    """Whether `statement` is one of the agent's texts' (`_statements`), as `ast.dump` says.
    Closed where a dump cannot be made (a literal past the digits an int may print, a tree
    too deep): then a statement of that key counts as the agent's, as `install` refused the
    whole text when it dumped every statement at once."""
    found = _statements.get(_key(statement))
    if found is None:
        return False
    if found[0]:  # (whole, then swapped in: a thread that finds no trees finds every dump)
        dumps = set(found[1])
        for tree in found[0]:
            try:
                dumps.add(_dump(tree))
            except Exception:  # noqa: BLE001 - ValueError, RecursionError, MemoryError
                found[2] = True
        found[1] = dumps
        found[0] = []
    if found[2]:
        return True
    try:
        return _dump(statement) in found[1]
    except Exception:  # noqa: BLE001 - as above: closed
        return True


def _audit(event, args):
    # Every audit event of the process comes here (each `id()`, `sys._getframe`, frame's
    # `f_code`, several a call through a proxy): those we act on are told apart first.
    if event not in _AUDITED or getattr(_busy, "on", False):
        return
    if event == "open":
        path = args[0] if args else None
        stub = _stub(path)
        if stub is not None and not _caller_runs_it(sys._getframe(1)):
            _stub_read(stub, "opened")
    elif event == "compile":
        filename = args[1] if len(args) > 1 else None
        if args and _runs_heard(args[0], filename, sys._getframe(1)):
            raise RuntimeError(
                "text the tested code chose (an answer, a docstring) is not run in the tests' "
                "process: the agent's code runs in a process of its own"
            )
        if (_statements or _pending) and args and _runs_text(args[0], sys._getframe(1)):
            _stub_read(str(args[1]) if len(args) > 1 else "", "compiled")  # its filename
            raise RuntimeError(
                "the agent's code runs in a process of its own: its source is not compiled in "
                "the tests' process (read it, or ast.parse it)"
            )
    elif event in _PROGRAM_EVENTS:
        at, cwd_at = _PROGRAM_EVENTS[event]
        if len(args) > at:
            cwd = args[cwd_at] if cwd_at is not None and len(args) > cwd_at else None
            path = _program_stub(args[at], cwd)
            if path is not None:
                _stub_read(path, "handed to a program")
