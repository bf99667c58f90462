"""nodecert stack: the pinned stacks and the compatibility gate."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import click

from nodecert.cli.common import (
    echo,
    emit_json,
    handle_errors,
    json_option,
    parse_date,
    verdict_text,
)
from nodecert.core.errors import ExitCode, NodecertError
from nodecert.core.verdict import Verdict
from nodecert.provision.preflight import role_components
from nodecert.stack import advisories
from nodecert.stack.compat import default_matrix
from nodecert.stack.gate import GateReport, evaluate
from nodecert.stack.manifest import SUPPORTED_OS, Stack, find_stack, list_stacks


@click.group()
def stack() -> None:
    """Pinned NVIDIA stacks and the compatibility gate.

    \b
    Examples:
      nodecert stack list
      nodecert stack show r580-cuda13.0 --os ubuntu-24.04
      nodecert stack check r580-cuda13.0 --gpu H200-SXM --os ubuntu-24.04
      nodecert stack check r550-cuda12.4 --gpu B200 --json
      nodecert stack advisories
    """


def _stack_summary(s: Stack) -> dict[str, Any]:
    return {"name": s.name, "title": s.title, "status": s.status,
            "driver_branch": s.driver_branch, "kernel_modules": s.kernel_modules,
            "components": s.components(), "os": list(s.os), "file": str(s.path)}


@stack.command("list")
@json_option
@handle_errors
def stack_list(as_json: bool) -> None:
    """List the pinned stacks shipped in stacks/."""
    stacks = list_stacks()
    if as_json:
        emit_json([_stack_summary(s) for s in stacks])
        return
    for s in stacks:
        echo(f"{s.name:<16} {s.status:<12} driver {s.driver} ({s.kernel_modules}), "
                   f"CUDA {s.cuda}, OS: {', '.join(s.os)}")
        echo(f"{'':<16} {s.title}")


@stack.command("show")
@click.argument("name")
@click.option("--os", "os_name", type=click.Choice(SUPPORTED_OS),
              help="Only the packages for this OS.")
@json_option
@handle_errors
def stack_show(name: str, os_name: str | None, as_json: bool) -> None:
    """Show every pinned component and package of stack NAME.

    \b
    Example:
      nodecert stack show r570-cuda12.8 --os ubuntu-22.04
    """
    s = find_stack(name)
    oses = [os_name] if os_name else list(s.os)
    if os_name and os_name not in s.os:
        raise NodecertError(f"stack {s.name} pins no packages for {os_name}",
                            hint=f"it supports: {', '.join(s.os)}")
    if as_json:
        data = _stack_summary(s) | {
            "driver": str(s.driver),
            "framework": {"python": s.framework.python, "index_url": s.framework.index_url,
                          "pytorch": str(s.framework.pytorch) if s.framework.pytorch else None,
                          "tensorflow": s.framework.tensorflow},
            "repository": {"url": s.repository.url, "key_url": s.repository.key_url,
                           "key_fingerprint": s.repository.key_fingerprint},
            "artifacts": [a.__dict__ for a in s.artifacts],
            "packages": {o: [{"component": p.component, "name": p.name,
                              "version": str(p.version), "origin": p.origin,
                              "confirmed": p.confirmed, "sources": list(p.sources)}
                             for p in s.os[o].packages] for o in oses},
        }
        emit_json(data)
        return
    echo(f"{s.name}: {s.title}  [{s.status}]")
    echo(f"  driver          {s.driver} (branch R{s.driver_branch}, "
               f"{s.kernel_modules} kernel modules)")
    for comp, ver in s.components().items():
        if comp != "driver":
            echo(f"  {comp:<15} {ver}")
    fw = s.framework
    echo(f"  framework       python {fw.python}"
               + (f", torch {fw.pytorch}" if fw.pytorch else "")
               + (f", tensorflow {fw.tensorflow}" if fw.tensorflow else "")
               + f" from {fw.index_url}")
    echo(f"  repository key  {s.repository.key_fingerprint}")
    for o in oses:
        echo(f"\n  {o} (NVIDIA repo: {s.os[o].os_repo})")
        for p in s.os[o].packages:
            mark = "" if p.confirmed else "  (unconfirmed)"
            echo(f"    {p.component:<15} {p.pin:<58} {p.origin:<6} "
                       f"[{', '.join(p.sources)}]{mark}")


def print_gate(report: GateReport) -> None:
    m = default_matrix()
    scope = ", ".join(x for x in (report.gpu and f"GPU {report.gpu}",
                                  report.os and f"OS {report.os}") if x) or "no GPU/OS given"
    echo(f"stack {report.stack} ({scope}), as of {report.date}")
    for r in report.results:
        cite = f"  [{', '.join(r.sources)}]" if r.sources else ""
        click.echo(f"  {verdict_text(r.verdict)} {r.rule:<34} {r.message}{cite}")
    for rule, why in report.not_evaluated:
        echo(f"  {'-':<5} {rule:<34} not evaluated: {why}")
    used = sorted({s for r in report.results for s in r.sources})
    if used:
        echo("  sources:")
        for key in used:
            src = m.sources[key]
            echo(f"    {key:<7} {src.title}" + (f" <{src.url}>" if src.url else ""))
    click.echo(f"verdict: {verdict_text(report.verdict)}")


@stack.command("check")
@click.argument("name")
@click.option("--gpu", help="GPU model to check against (e.g. H200-SXM, B200, L40S).")
@click.option("--os", "os_name", type=click.Choice(SUPPORTED_OS), help="Target OS.")
@click.option("--date", "on_date", callback=parse_date, metavar="YYYY-MM-DD",
              help="Judge driver lifecycle as of this date (default: today).")
@click.option("--allow-advisory", "allow_advisories", multiple=True, metavar="ID",
              help="Accept this security advisory: WARN, not FAIL, and say so. Repeatable.")
@click.option("--with", "others", multiple=True, metavar="COMPONENT=VERSION",
              help="Judge this version of a component installed beside the stack instead "
                   "of the role's default (e.g. container_toolkit=1.17.3-1).")
@json_option
@handle_errors
def stack_check(name: str, gpu: str | None, os_name: str | None, on_date: dt.date | None,
                allow_advisories: tuple[str, ...], others: tuple[str, ...],
                as_json: bool) -> None:
    """Run every compatibility rule for stack NAME and explain each verdict.

    NAME is a stack name from `nodecert stack list` or a path to a manifest.
    Exit 0 if every rule is PASS or WARN, 1 on any FAIL, 2 on bad input.

    \b
    The stack's driver and what the roles install beside it (the container toolkit at
    the role's pinned version) are judged against the security bulletins
    (`nodecert stack advisories`).

    \b
    Examples:
      nodecert stack check r580-cuda13.0 --gpu H200-SXM --os ubuntu-24.04
      nodecert stack check ./my-stack.yml --gpu B200 --json
      nodecert stack check r570-cuda12.8 --allow-advisory NVIDIA-DRIVER-2026-05
    """
    components = role_components()
    for item in others:
        key, eq, value = item.partition("=")
        if not eq or key not in advisories.COMPONENTS or key == "driver" or not value:
            raise NodecertError(f"--with {item!r}: expected COMPONENT=VERSION",
                                hint="COMPONENT is one of " + ", ".join(
                                    c for c in advisories.COMPONENTS if c != "driver"))
        components[key] = value
    report = evaluate(find_stack(name), gpu=gpu, os_name=os_name, today=on_date,
                      others=components, allow_advisories=frozenset(allow_advisories))
    if as_json:
        emit_json(report.as_dict())
    else:
        print_gate(report)
    sys.exit(int(ExitCode.FAILED if report.verdict >= Verdict.FAIL else ExitCode.OK))


@stack.command("advisories")
@json_option
@handle_errors
def stack_advisories(as_json: bool) -> None:
    """List the security bulletins the gate and `stack.advisories` judge against: each
    component's fixed releases, with its sources, and what the table does not cover.

    \b
    Example:
      nodecert stack advisories --json
    """
    table = advisories.default_advisories()
    m = default_matrix()
    if as_json:
        emit_json({"as_of": table.as_of, "advisories": [
            {"id": a.id, "kind": a.kind, "component": a.component, "cves": list(a.cves),
             "summary": a.summary, "line": a.line, "fixed": [str(v) for v in a.fixed],
             "introduced": str(a.introduced) if a.introduced else None,
             "sources": [{"key": k, "title": m.sources[k].title, "url": m.sources[k].url}
                         for k in a.sources]} for a in table.advisories],
            "not_tabled": [{"component": n.component, "cves": list(n.cves), "why": n.why}
                           for n in table.not_tabled],
            "bundled": [{"cuda": b.cuda, b.component: b.version, "sources": list(b.sources)}
                        for b in table.bundled]})
        return
    echo(f"advisories as of {table.as_of}:")
    for a in table.advisories:
        since = f" (affected from {a.introduced})" if a.introduced else ""
        echo(f"  {a.id:<22} {a.component:<18} fixed in {', '.join(map(str, a.fixed))}{since}")
        what = ", ".join(a.cves) if a.kind == "security" else "correctness"
        echo(f"  {'':<22} {what}: {a.summary} [{', '.join(a.sources)}]")
    for b in table.bundled:
        echo(f"  CUDA {b.cuda} ships {b.component} {b.version} [{', '.join(b.sources)}]")
    for n in table.not_tabled:
        echo(f"  not tabled: {n.component} {', '.join(n.cves)}: {n.why}")


@stack.command("lock")
@click.argument("name")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="New stack file (e.g. $NODECERT_HOME/stacks/NAME.yml).")
@click.option("--index-url", metavar="URL",
              help="Package index to lock against (default: the stack's).")
@json_option
@handle_errors
def lock_cmd(name: str, out: Path, index_url: str | None, as_json: bool) -> None:
    """Pin the stack's framework wheels by sha256: download every wheel its environment
    installs (the framework's and each dependency's) and write the stack with
    framework.hashes, so pip installs it with --require-hashes.

    \b
    Example:
      nodecert stack lock r580-cuda13.0 --out ~/site/nodecert/stacks/r580-cuda13.0.yml
    """
    from nodecert.provision.mirror import lock_stack

    got = lock_stack(name, out, index_url)
    if as_json:
        emit_json(got)
        return
    echo(f"{got['file']}: {got['stack']} with {len(got['hashes'])} wheel(s) pinned by sha256")


@stack.command("gpus")
@json_option
@handle_errors
def stack_gpus(as_json: bool) -> None:
    """List the GPU models the gate knows (names for --gpu and nodecert_gpu_model)."""
    m = default_matrix()
    if as_json:
        emit_json([{"key": g.key, "name": g.name, "pci_device_ids": list(g.pci_device_ids),
                     "architecture": g.architecture, "nvswitch": g.nvswitch,
                     "open_modules": g.open_modules} for g in m.gpus.values()])
        return
    for g in m.gpus.values():
        echo(f"{g.key:<16} {g.name:<44} 10de:{'/'.join(g.pci_device_ids):<10} "
                   f"{g.architecture}{', NVSwitch' if g.nvswitch else ''}")
