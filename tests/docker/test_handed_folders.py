"""What the tested user may do in a folder the tests hand over, in the real verifier container
under both runtimes: use it as under plain pytest, never replace the tests' files there, and
never take the tests' process, through a link it made, where it could not go itself
(verifier_runtime/access.py)."""

from __future__ import annotations

from dataclasses import replace

from sandboxes.backend import Verdict
from sandboxes.reward import UNGUARDED
from sandboxes.workspace_tar import build_tar
from tests.runtimes import both_runtimes

# Each function does one thing in the folder of `out` and says what happened; the tests check
# that the attacks failed and the honest shapes worked.
_SOLUTION = r"""
import os


def replace_sibling(out):
    target = os.path.join(os.path.dirname(out), "expected.json")
    try:
        os.unlink(target)
    except OSError as e:
        unlinked = type(e).__name__
    else:
        unlinked = "done"
    mine = out + ".mine"
    with open(mine, "w") as f:
        f.write("[]")
    try:
        os.replace(mine, target)
    except OSError as e:
        return unlinked, type(e).__name__
    return unlinked, "done"


def convert(src, out):
    with open(out, "w") as f:
        f.write("[]")
    target = os.path.join(os.path.dirname(out), "expected.json")
    os.unlink(target)  # the folder is not sticky: a file of the tests (src) was handed over
    with open(target, "w") as f:
        f.write("[]")


def archive(src, folder):
    os.mkdir(folder)
    os.rename(src, os.path.join(folder, os.path.basename(src)))


def link(target, at):
    os.symlink(target, at)


def nested_link(target, folder):
    os.mkdir(folder)
    os.symlink(target, os.path.join(folder, "result.json"))


def own_file_linked(out):
    real = out + ".real"
    with open(real, "w") as f:
        f.write("[1]")
    os.symlink(real, out)


def organize(folder):
    os.mkdir(os.path.join(folder, "txt"))
    os.rename(os.path.join(folder, "a.txt"), os.path.join(folder, "txt", "a.txt"))
    os.unlink(os.path.join(folder, "old.log"))
    fresh = os.path.join(folder, "b.txt.new")
    with open(fresh, "w") as f:
        f.write("B")
    os.replace(fresh, os.path.join(folder, "b.txt"))


def loose_file(handed):
    # handed: a NamedTemporaryFile of the tests, in /tmp itself; the tests' others beside it
    # are found by listing /tmp, which everyone may
    found = {"others read": []}
    with open(handed) as f:
        found["read"] = f.read()
    try:
        os.unlink(handed)
    except OSError as e:
        found["unlink"] = type(e).__name__
    else:
        found["unlink"] = "done"
    folder = os.path.dirname(handed)
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if path == handed or not os.path.isfile(path) or os.stat(path).st_uid == os.getuid():
            continue
        try:
            with open(path) as f:
                found["others read"].append(f.read())
        except OSError:
            pass
    return found


def echo_and_read(buf, inside=""):
    # The tests' files (or folders, reading `inside` them) in /tmp, named through a tests'
    # object that echoes what it is given (their answer carries the name back), then opened
    found = []
    for name in sorted(os.listdir("/tmp")):
        path = os.path.join("/tmp", name)
        kind = os.path.isdir(path) if inside else os.path.isfile(path)
        if not kind or os.stat(path).st_uid == os.getuid():
            continue
        buf.seek(0)
        buf.truncate()
        buf.write("Z" + path)  # (read back from the second character: a name it never sent)
        buf.seek(1)
        buf.read()
        try:
            with open(os.path.join(path, inside) if inside else path) as f:
                found.append(f.read())
        except OSError:
            pass
    return found


def a_name_of_theirs():
    for name in sorted(os.listdir("/tmp")):
        path = os.path.join("/tmp", name)
        if os.path.isfile(path) and os.stat(path).st_uid != os.getuid():
            return path
    return None


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return type(e).__name__


def plant_for_write(out):
    with open(out, "w") as f:
        f.write("[]")
    os.chmod(out, 0o666)
    os.symlink(out, os.path.join(os.path.dirname(out), "expected.json"))
"""

_TESTS = r"""
import io
import json
import tempfile
from pathlib import Path

import pytest

import solution

DATA = Path(__file__).parent / "data"


def test_the_tests_files_stay_theirs(tmp_path):
    expected = tmp_path / "expected.json"
    expected.write_text("[1]")
    unlinked, renamed = solution.replace_sibling(str(tmp_path / "out.json"))
    assert unlinked == "PermissionError"
    if renamed == "done":  # gVisor lets a rename replace another's file in a sticky folder
        with pytest.raises(PermissionError):
            expected.read_text()
    else:
        assert renamed == "PermissionError"
        assert expected.read_text() == "[1]"


def test_a_replaced_file_of_the_tests_is_not_read(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("a,b\n1,2\n")
    expected = tmp_path / "expected.json"
    expected.write_text("[1]")
    solution.convert(str(src), str(tmp_path / "out.json"))
    with pytest.raises(PermissionError):
        expected.read_text()


def test_a_file_handed_over_may_move(tmp_path):
    src = tmp_path / "app.log"
    src.write_text("log")
    solution.archive(str(src), str(tmp_path / "archive"))
    assert (tmp_path / "archive" / "app.log").read_text() == "log"
    assert not src.exists()


def test_no_read_through_a_link_to_the_tests_data(tmp_path):
    out = tmp_path / "out.json"
    solution.link(str(DATA / "expected.json"), str(out))
    with pytest.raises(PermissionError):
        out.read_text()


def test_no_read_through_a_link_in_its_own_folder(tmp_path):
    solution.nested_link(str(DATA / "expected.json"), str(tmp_path / "out"))
    with pytest.raises(PermissionError):
        (tmp_path / "out" / "result.json").read_bytes()


def test_no_write_through_its_link(tmp_path):
    out = tmp_path / "out.json"
    solution.plant_for_write(str(out))
    with pytest.raises(PermissionError):
        (tmp_path / "expected.json").write_text("[1]")
    assert out.read_text() == "[]"


def test_a_link_to_its_own_file_reads(tmp_path):
    out = tmp_path / "out.json"
    solution.own_file_linked(str(out))
    assert json.loads(out.read_text()) == [1]


def test_a_folder_handed_over_whole_is_the_solutions_to_manage(tmp_path):
    for name in ("a.txt", "b.txt", "old.log"):
        (tmp_path / name).write_text(name)
    solution.organize(str(tmp_path))
    assert (tmp_path / "txt" / "a.txt").read_text() == "a.txt"
    assert not (tmp_path / "old.log").exists()
    assert (tmp_path / "b.txt").read_text() == "B"


def test_a_file_handed_over_from_tmp_itself_is_that_file_alone():
    with tempfile.NamedTemporaryFile("w") as handed, tempfile.NamedTemporaryFile("w") as other:
        handed.write("in")
        handed.flush()
        other.write("expected")
        other.flush()
        found = solution.loose_file(handed.name)
        assert found == {"read": "in", "unlink": "PermissionError", "others read": []}
        assert Path(handed.name).read_text() == "in"


def test_no_loose_file_of_the_tests_through_an_echo():
    with tempfile.NamedTemporaryFile("w") as expected:
        expected.write("expected")
        expected.flush()
        assert solution.echo_and_read(io.StringIO()) == []


def test_no_folder_of_the_tests_through_an_echo():
    folder = Path(tempfile.mkdtemp())
    (folder / "expected.json").write_text("[1]")
    assert solution.echo_and_read(io.StringIO(), "expected.json") == []


def test_no_loose_file_of_the_tests_by_a_name_it_returned():
    with tempfile.NamedTemporaryFile("w") as expected:
        expected.write("expected")
        expected.flush()
        name = solution.a_name_of_theirs()
        assert name == expected.name
        assert solution.read(name) == "PermissionError"


def test_a_loose_file_another_process_of_the_tests_made_stays_closed():
    # (as test.sh's `mktemp` log, whose change time every write moves past the tests' start)
    import os
    import subprocess
    import uuid

    path = "/tmp/made-by-a-shell-" + uuid.uuid4().hex
    subprocess.run(["sh", "-c", 'umask 077; echo log > "$1"', "sh", path], check=True)
    try:
        assert solution.read(path) == "PermissionError"
    finally:
        os.remove(path)


def test_a_link_to_a_file_it_was_handed_reads(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("a,b\n")
    solution.link(str(src), str(tmp_path / "copy.csv"))
    assert (tmp_path / "copy.csv").read_text() == "a,b\n"
"""


@both_runtimes
async def test_the_tested_user_takes_the_tests_nowhere_through_a_folder_handed_over(
    backend, example_task, run_labels
):
    """The folder of an output path handed over is sticky: the tested user cannot unlink the
    tests' expected file beside it, nor rename its own over it (runc; gVisor allows the
    rename, and the tests' process is then refused the file it wrote, now another's). Where
    a file of the tests was handed over (which the tested code may move) the folder is not
    sticky, and the tests' process is refused their file replaced by the tested user's. The
    tests' process reads through the tested user's links only what that user could read
    itself (its own file, one it was handed), never /tests (by a link in the folder, or in a
    folder the tested user made there), and writes through none of them. A folder handed
    over whole is the tested code's to manage: it moves, replaces and deletes the tests'
    files there. A file handed over from /tmp itself (a NamedTemporaryFile) is read there,
    never unlinked (/tmp is sticky), and the tests' other file beside it stays closed, as
    does one whose name the tested code has an object of the tests echo back to it, or
    returns for the tests to pass on; so does a folder of theirs named by an echo. Each
    refusal is reported: the reward (every test passed, the attacks having failed) is flagged
    `unguarded`."""
    tests = {
        **example_task.test_files,
        "test_solution.py": _TESTS.encode(),
        "data/expected.json": b"[1]",
    }
    task = replace(example_task, test_files=tests)
    result = await backend.verify(task, build_tar({"solution.py": _SOLUTION.encode()}), run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 1.0, [UNGUARDED]), (
        result.output
    )
    assert "the tested code put in its way" in result.output, result.output


_PEEK_SOLUTION = r"""
import os


def peek_at(folder):
    try:
        with open(os.path.join(folder, "helpers.py")) as f:
            return f.read()
    except OSError as e:
        return type(e).__name__


def peek(*names):
    # Each folder the environment names (the shell's PWD and OLDPWD, a variable of the
    # tests'): the tests' own module there, read as the tested user
    found = []
    for name in names:
        try:
            with open(os.path.join(os.environ.get(name) or "/nowhere", "helpers.py")) as f:
                found.append(f.read())
        except OSError:
            pass
    return found
"""

_PEEK_TESTS = r"""
import os

import helpers
import solution


def test_the_shells_folder_is_not_handed_over():
    assert os.environ["PWD"] == os.path.dirname(helpers.__file__)
    assert solution.peek("PWD", "OLDPWD") == []


def test_nor_as_an_argument():
    assert solution.peek_at(os.path.dirname(helpers.__file__)) == "PermissionError"


def test_nor_the_tests_own_folder_in_a_variable(monkeypatch):
    monkeypatch.setenv("PROBE_DIR", os.path.dirname(helpers.__file__))
    assert solution.peek("PROBE_DIR") == []
"""

# A helper module of the tests' run from a folder test.sh made with mktemp -d, its working
# folder (pytest writes the module's bytecode there: the folder is newer than the tests).
_PEEK_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\nT=$(mktemp -d)\n"
    'echo "EXPECTED = 42" > "$T/helpers.py"\ncd "$T"\nexport PYTHONPATH="/app:$T"\n'
    "python3 -m pytest -q -p no:cacheprovider /tests/test_solution.py\nrc=$?\n"
    'if [ "$rc" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; '
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)


@both_runtimes
async def test_folders_the_environment_names_that_hold_the_tests_stay_closed(
    backend, example_task, run_labels
):
    """The tests import a module of theirs from a folder under /tmp that is also their working
    folder: the shell's `PWD` (and a variable the tests set to that folder) names it in the
    environment the tested process gets, but a folder that holds a module the tests' process
    loaded is never handed over, nor as an argument: the tested code reads nothing of theirs
    there."""
    tests = {"test.sh": _PEEK_SH.encode(), "test_solution.py": _PEEK_TESTS.encode()}
    task = replace(example_task, test_files=tests)
    workspace = build_tar({"solution.py": _PEEK_SOLUTION.encode()})
    result = await backend.verify(task, workspace, run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 1.0, []), result.output
