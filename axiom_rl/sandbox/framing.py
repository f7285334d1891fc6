"""Framing between the sandbox's processes: one JSON value per line over a file descriptor, with
a cap on the bytes a reader will take and, on a socket, descriptors riding along. Stdlib only."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import time

# json.loads on bytes first guesses their encoding (UTF-8, 16 or 32) and checks its arguments: a
# third of its time on these short lines. Ours are ASCII JSON (json.dumps escapes the rest); bytes
# that are not UTF-8 fail as ValueError, as malformed JSON does.
_decoder = json.JSONDecoder()

# How deep a line from a candidate may nest its JSON: codec.MAX_DEPTH levels of values, each of
# which may take two JSON levels (a tuple is {"$t": [...]}), and the message around them.
MAX_NESTING = 2 * 100 + 8
# JSON values (numbers, strings, lists, objects) that all of one job's result lines may hold
# together: what the trusted side decodes is bounded by this, not only by the bytes. Each value
# the codec sends takes one to three (a tuple: an object, a list, its items), and the codec sends
# at most a million in one result.
MAX_RESULT_VALUES = 3_000_000


def decode_line(line: bytes) -> object:
    """One JSON value from one line (ValueError if it is not one, or nests too deep to decode)."""
    text = line.decode("utf-8", "surrogatepass")
    # raw_decode alone for a line that is exactly one value, as ours are: decode() matches a
    # pattern for white space before and after it too, half its time on these short lines.
    # Anything else goes to decode(), which accepts or refuses it as json.loads would.
    try:
        try:
            value, end = _decoder.raw_decode(text)
        except ValueError:
            return _decoder.decode(text)
        return value if end == len(text) else _decoder.decode(text)
    except RecursionError:  # a line nested deeper than the interpreter's stack allows
        raise ValueError("nested too deep") from None


class ValueBudget:
    """What an untrusted writer's lines may still hold, over all the lines of one job: decoding
    a line that would take more, or nest deeper than MAX_NESTING, fails with ValueError before
    anything of it is decoded.

    A 31 MB line of empty lists decodes to some 10 million objects (1.6 GB in the parent that
    decoded a candidate's report, and seconds of its time) though every byte was within limits;
    a 2 KB line of nested brackets ran the decoder out of stack. A line holds at most as many
    values as it has commas and opening brackets, plus one, and nests at most as deep as it has
    opening brackets: counted in the bytes first (C speed), which settles ordinary results; a
    line those counts do not settle is counted again without its strings (whose brackets and
    commas are text), in time linear in its length (_bare, _nesting)."""

    def __init__(self, values: int = MAX_RESULT_VALUES, nesting: int = MAX_NESTING) -> None:
        self.values, self.nesting = values, nesting

    def decode(self, line: bytes) -> object:
        opens = line.count(b"[") + line.count(b"{")
        most = opens + line.count(b",") + 1
        if opens > self.nesting or most > self.values:
            bare = _bare(line)
            opens = bare.count(b"[") + bare.count(b"{")
            most = opens + bare.count(b",") + 1
            if most > self.values:
                raise ValueError("results hold too many values")
            if opens > self.nesting and _nesting(bare, self.nesting) > self.nesting:
                raise ValueError("results nest too deep")
        value = decode_line(line)
        self.values -= most
        return value


_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_INNERMOST = re.compile(rb"\[\]|\{\}")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def _bare(line: bytes) -> bytes:
    """`line` without what its JSON strings hold: escapes first (a backslash and the byte after
    it, left to right, so an escaped backslash before a quote leaves the quote), then every
    other stretch between quotes. Linear: no pattern that can rescan the line."""
    return b"".join(_ESCAPE.sub(b"", line).split(b'"')[0::2])


def _nesting(bare: bytes, most: int) -> int:
    """How deep the brackets of `bare` (a line without its strings) nest, counted up to `most + 1`:
    each pass removes the innermost pair of every nest."""
    brackets = bare.translate(None, _NOT_BRACKETS)
    for depth in range(most + 1):
        if not brackets:
            return depth
        brackets = _INNERMOST.sub(b"", brackets)  # one scan: a pair it makes is the next pass's
    return most + 1


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (os.write may take only part of it: a pipe, a socket)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def memory_file(content: bytes, name: str) -> int:
    """A descriptor of an anonymous file in memory holding `content`, to pass to another process
    (SCM_RIGHTS, or inherited) that reads it with read_memory_file."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        write_all(fd, content)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_memory_file(fd: int) -> bytes:
    """What a memory file from memory_file holds (read from its start, whoever wrote it).

    Its size first, then one read of exactly that: a read of a fixed 1 MB allocated (and mapped)
    that much, then shrank it, in every candidate."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    while len(data) < size and (more := os.pread(fd, size - len(data), len(data))):
        data += more
    return data


def send_line(fd: int, obj: object) -> None:
    write_all(fd, (json.dumps(obj, separators=(",", ":")) + "\n").encode())


class LineReader:
    """Newline-framed JSON from a file descriptor, with a cap on the bytes it will take."""

    def __init__(
        self, fd: int, max_bytes: int = 64 << 20, take_fds: bool = False, budget: ValueBudget | None = None
    ) -> None:
        """`budget`: lines from an untrusted writer are decoded within it (see ValueBudget)."""
        self.fd, self.total, self.max_bytes, self.eof = fd, 0, max_bytes, False
        self.budget = budget
        # What arrived and was not popped yet, in the pieces read, joined only once a line is
        # complete: a line of many megabytes arrives in many reads, and growing one bytes object
        # by each copied (and searched) all of it again.
        self.parts: list[bytes] = []
        self.complete = False  # whether `parts` hold a newline
        # A socket to receive descriptors sent along with the bytes (see take_fds).
        self.sock = socket.socket(fileno=os.dup(fd)) if take_fds else None
        self.fds: list[int] = []

    def take_fds(self) -> list[int]:
        """The descriptors received so far, handed over to the caller."""
        fds, self.fds = self.fds, []
        return fds

    def fill(self) -> None:
        """One read() into the buffer (call when select says the fd is readable)."""
        if self.sock is not None:
            chunk, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
            self.fds += fds
        else:
            chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.eof = True
            return
        self.total += len(chunk)
        if self.total > self.max_bytes:
            raise ValueError("too much data")
        self.parts.append(chunk)
        self.complete = self.complete or b"\n" in chunk

    def pop(self) -> object | None:
        """The next complete message in the buffer, if any (ValueError on garbage)."""
        if not self.complete:
            return None
        line, _, rest = b"".join(self.parts).partition(b"\n")
        self.parts = [rest] if rest else []
        self.complete = b"\n" in rest
        return decode_line(line) if self.budget is None else self.budget.decode(line)

    def read(self, timeout: float | None) -> object | None:
        """Block for the next message; None on EOF or timeout (see .eof)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = self.pop()
            if msg is not None or self.eof:
                return msg
            if deadline is not None:  # without a deadline, read() itself blocks: no select needed
                wait = max(0.0, deadline - time.monotonic())
                if not select.select([self.fd], [], [], wait)[0]:
                    return None
            self.fill()
