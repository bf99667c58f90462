"""The ordered verdict scale shared by the stack gate and (later) validators."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Verdict(Enum):
    """PASS < WARN < FAIL < ERROR: an aggregate is the worst of its parts."""

    PASS = 0
    WARN = 1
    FAIL = 2
    ERROR = 3

    def __str__(self) -> str:
        return self.name

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return self.value < other.value

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return self.value <= other.value

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return self.value > other.value

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return self.value >= other.value


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    return max(verdicts, key=lambda v: v.value, default=Verdict.PASS)
