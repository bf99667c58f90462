"""Error types and the exit codes every command shares.

Exit codes are part of the CLI contract (documented in README.md):

* 0 -- success: every rule or check is PASS or WARN
* 1 -- a rule or check FAILed (the input was fine, the answer is "no")
* 2 -- bad input: unknown stack/GPU/OS, malformed manifest or inventory
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2


class NodecertError(Exception):
    """A problem with the user's input: says where, what is wrong and how to fix it."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None) -> None:
        self.what = what
        self.where = where
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        if self.hint:
            text += f"\n  how to fix: {self.hint}"
        return text


class ManifestError(NodecertError):
    """A stack manifest or compatibility data file is malformed."""


class InventoryError(NodecertError):
    """An inventory is malformed or does not describe the ordered hardware."""


class UnknownNameError(NodecertError):
    """A stack, GPU model or OS that nodecert does not know."""


class VersionError(NodecertError):
    """A version string that does not parse."""
