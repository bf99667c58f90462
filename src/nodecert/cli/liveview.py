"""The live view of a large run on a terminal (rich): a bar, the counts, the latest
alarms. Alarms are also printed above it as they happen, so they stay in the
scroll-back once the view is gone. Node text is escaped before rich sees it (rich
markup in a host's output is shown, never interpreted)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.text import Text

from nodecert.core.textsafe import one_line
from nodecert.validation.progress import Snapshot


def wanted(mode: str) -> bool:
    """--progress live, or auto on a terminal."""
    return mode == "live" or (mode == "auto" and sys.stderr.isatty())


class LiveView:
    def __init__(self) -> None:
        self.console = Console(stderr=True, highlight=False)
        self.live = Live(Text("starting ..."), console=self.console, refresh_per_second=2,
                         transient=False, redirect_stdout=False, redirect_stderr=False)

    def say(self, line: str) -> None:
        self.console.print(escape(one_line(line)), soft_wrap=True)

    def status(self, snap: Snapshot) -> None:
        done = snap.states.get("finished", 0)
        bar = ProgressBar(total=max(snap.total, 1), completed=done, width=40)
        alarms = [Text(one_line(a), style="red", overflow="ellipsis", no_wrap=True)
                  for a in snap.failures[-5:]]
        self.live.update(Group(Text(snap.line()), bar, *alarms))


@contextmanager
def live_view() -> Iterator[LiveView]:
    view = LiveView()
    with view.live:
        yield view


__all__ = ["LiveView", "live_view", "wanted"]
