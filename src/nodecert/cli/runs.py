"""nodecert runs: what is done to a run directory as a whole (merging a sliced run)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodecert.cli import common
from nodecert.core.errors import ExitCode
from nodecert.core.verdict import Verdict


@click.group("runs")
def runs() -> None:
    """Run directories as a whole."""


@runs.command("merge", help="""Make one run of a sliced run's slices.

Reads every host's record in RUN_DIR (the directory every `validate --slice` of one
--run-id wrote into) and writes the run's summary (validate.json). A host whose slice
never ran it, or ended before it finished (killed, lost), is recorded as ERROR "not run"
for each of its checks -- never absent, never a pass. Run the lost slice again (the
same --run-id and --slice) and merge again: only its hosts' records change. The last
slice to end merges on its own; this is for a run with a slice that did not end.

\b
Exit codes: 0 every host PASS or WARN, 1 any FAIL or ERROR or a slice missing, 2 not a
sliced run.

\b
Examples:
  nodecert runs merge /shared/runs/20261207-101500-3fa9c1
  nodecert runs merge /shared/runs/20261207-101500-3fa9c1 --json
""")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@common.json_option
@common.handle_errors
def merge_cmd(run_dir: Path, as_json: bool) -> None:
    from nodecert.validation.slices import merge

    merged = merge(run_dir)
    code = ExitCode.OK if merged.verdict <= Verdict.WARN and not merged.slices_missing \
        and not merged.lost else ExitCode.FAILED
    if as_json:
        common.emit_json(merged.summary)
        sys.exit(int(code))
    s = merged.summary
    common.echo(f"{s['run_dir']}: {s['verdict']} over {len(s['hosts'])} host(s) in "
                f"{s['slices']} slice(s)")
    if merged.slices_missing:
        common.echo("slices that did not end: "
                    + ", ".join(str(k) for k in merged.slices_missing))
    for host in merged.lost:
        common.echo(f"  {host:<14} ERROR  not run: {s['hosts'][host]['error']}")
    sys.exit(int(code))
