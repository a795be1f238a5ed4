"""Pickles the tested code made are unpickled in the tested process, never in the tests'.

Unpickling runs what the pickle names (any importable callable, with any arguments: `exec` of
any text, `setattr` on any module), so a pickle is code. In one process the agent's pickle
would run with the agent's rights anyway; in the tests' process it would run with theirs: set
the tests' expected value, patch the runner. So in the tests' process:

- `pickle.loads(data)` of bytes the tested process answered (`pickle.loads(solution.dumps(x))`)
  and `pickle.load(f)` of such bytes in memory (`io.BytesIO`), or of a file the tested user
  owns (its `save(path)`, then the tests' `pickle.load(open(path, "rb"))`), unpickle in the
  tested process; the object arrives as any answer does (a proxy, or plain data by value).
  `pickle.load` there takes one pickle, as it would here: its length is read from the opcodes
  (pickletools, which runs nothing), and the file is left just past it.
- The tests' own pickles, and files the tests wrote, load here as before.

Not seen: bytes the tests build from pieces the tested process sent or that it sent inside a
container, and `pickle.Unpickler` used directly (as for text, sources.py).

Standard library only, Python >= 3.8.
"""

import io
import os
import pickle

_installed = []


def install(heard, unpickle_there, tested_uid):
    """Replace `pickle.loads` and `pickle.load` of this process (before any test module binds
    them). `heard(data)`: whether the tested process answered these bytes (sources.py keeps
    them); `unpickle_there(data)`: the object the tested process unpickles from `data`;
    `tested_uid()`: the tested user's uid, None when the tested process runs as ours."""
    if _installed:
        return
    _installed.append(True)
    original_loads, original_load = pickle.loads, pickle.load

    def loads(data, *args, **kwargs):
        if isinstance(data, (bytes, bytearray, memoryview)) and heard(bytes(data)):
            return unpickle_there(bytes(data))
        return original_loads(data, *args, **kwargs)

    def load(file, *args, **kwargs):
        if not _theirs(file, heard, tested_uid()):
            return original_load(file, *args, **kwargs)
        start = file.tell()
        data = file.read()
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if type(data) is not bytes:
            raise TypeError("pickle.load needs a file opened in binary mode")
        end = _length(data)
        file.seek(start + end)
        return unpickle_there(data[:end])

    for new, old in ((loads, original_loads), (load, original_load)):
        new.__name__, new.__qualname__, new.__doc__ = old.__name__, old.__qualname__, old.__doc__
    pickle.loads, pickle.load = loads, load


def _theirs(file, heard, uid):
    """Whether `file` holds bytes the tested code made: a BytesIO of bytes it answered, or a
    file its user owns (seekable: read whole, then left just past the one pickle taken)."""
    if isinstance(file, io.BytesIO):
        return heard(file.getvalue()[file.tell() :])
    if uid is None:
        return False
    try:
        return os.fstat(file.fileno()).st_uid == uid and file.seekable()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


def _length(data):
    """The length of the first pickle in `data`, read from its opcodes (running nothing)."""
    import pickletools  # (only when a pickle of theirs is loaded)

    for opcode, _arg, pos in pickletools.genops(data):
        if opcode.name == "STOP":
            return pos + 1
    raise pickle.UnpicklingError("pickle data was truncated")
