"""nodecert parse: a tool's output a user already has, read into JSON."""

from __future__ import annotations

from pathlib import Path

import click

from nodecert.cli.common import emit_json, handle_errors
from nodecert.validation.triage import TOOLS, parse_file

_NAMES = sorted(TOOLS, key=str.lower)
HELP = (
    "Read FILE as TOOL's output with the parsers the checks use; print JSON.\n\n"
    "For triage: the output of a node nodecert never ran on is read the way a check reads "
    "it, or refused naming the line and what is wrong (exit 2). Nothing is judged: the "
    "figures are shown as the tool printed them.\n\n"
    "\b\nTOOL is one of:\n"
    + "".join(f"  {name:<24} {TOOLS[name][0]}\n" for name in _NAMES)
    + "\n\b\nExamples:\n"
    "  nodecert parse p2pBandwidthLatencyTest p2p.txt\n"
    "  nodecert parse nvidia-smi-q-x smi.xml | jq '.gpus[].serial'\n"
    "  nodecert parse dmesg kern.log\n")


@click.command("parse", help=HELP)
@click.argument("tool", type=click.Choice(_NAMES), metavar="TOOL")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@handle_errors
def parse_cmd(tool: str, file: Path) -> None:
    emit_json(parse_file(tool, file))
