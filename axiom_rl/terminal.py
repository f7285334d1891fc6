"""Text from stored data, made safe to print to a terminal.

Completions, verifier details, problem files and results databases come from elsewhere: a
policy's output, or a file someone handed over. Printed as they are, their escape sequences act
on the terminal: set the window title, write the clipboard (OSC 52), move the cursor back over a
line to fake a "passed". Every printing of such text goes through `printable`, which shows those
characters as escapes instead.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls but tab and newline (ESC, carriage return, backspace, bell...), DEL, the C1 controls
# (0x9b is a one-byte CSI to some terminals), and the bidirectional marks and overrides, which can
# make a line read as something other than what it holds.
_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every character a terminal would act on written as an escape (`\\x1b`, `\\u202e`)."""
    return _ACTIVE.sub(_escape, text)


_LINE_BREAKS = re.compile("[\t\n]")


def one_line(text: str) -> str:
    """`printable(text)` with tabs and newlines escaped too: a name or a table cell stays on its line."""
    return _LINE_BREAKS.sub(_escape, printable(text))


def cell(text: object) -> Text:
    """A table cell of stored text: on one line, escaped (one_line), never read as rich markup."""
    return Text(one_line(str(text)))
