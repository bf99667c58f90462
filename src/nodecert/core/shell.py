"""Running external commands: always with a timeout, never silently."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from nodecert.core.errors import NodecertError


class CommandError(NodecertError):
    """An external command failed or timed out; carries its output as evidence."""

    exit_code = NodecertError.exit_code

    def __init__(self, argv: Sequence[str], what: str, output: str = "") -> None:
        self.argv = list(argv)
        self.output = output
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(f"`{' '.join(argv)}` {what}" + (f"\n{tail}" if tail else ""))


def run(argv: Sequence[str], *, timeout: float, check: bool = True,
        input_text: str | None = None, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run argv (no shell) with a hard timeout; raise CommandError on failure if check."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              input=input_text, cwd=cwd, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        raise CommandError(argv, f"timed out after {timeout:.0f} s", out) from exc
    except FileNotFoundError as exc:
        raise CommandError(argv, "not found: is it installed?") from exc
    if check and proc.returncode != 0:
        raise CommandError(argv, f"exited {proc.returncode}", proc.stdout + proc.stderr)
    return proc
