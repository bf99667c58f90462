"""nodecert mirror: build and verify the air-gapped mirror `provision --mirror` uses."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodecert.cli.common import echo, emit_json, handle_errors, json_option
from nodecert.core.errors import ExitCode


@click.group()
def mirror() -> None:
    """The air-gapped mirror: a stack's NVIDIA packages and framework wheels.

    \b
    Examples:
      nodecert mirror build --stack r580-cuda13.0 --os ubuntu-24.04 \\
          --key 3bf863cc.pub --out /srv/mirror/r580
      nodecert mirror verify /srv/mirror/r580
      provision -i site/inventory --mirror http://mirror.internal/r580

    \b
    Exit codes: 0 built / verified; 1 the mirror does not verify; 2 bad input or an
    upstream that cannot be fetched or does not match its own index.
    """


@mirror.command("build")
@click.option("--stack", "stack_name", required=True, help="Stack to mirror.")
@click.option("--os", "os_name", required=True, help="OS the nodes run (ubuntu-24.04 ...).")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="New (or empty) directory for the mirror.")
@click.option("--apt-upstream", metavar="URL",
              help="NVIDIA's repository or a copy of it: a flat apt repository URL or "
                   "directory (default: the stack's repository for --os).")
@click.option("--index-url", metavar="URL",
              help="Python package index for the framework wheels (default: the stack's).")
@click.option("--key", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The repository's signing key file; it must carry exactly the stack's "
                   "fingerprint. The upstream's Release.gpg is checked with it.")
@click.option("--extra-package", "extra", multiple=True, metavar="NAME[=VERSION]",
              help="Also mirror this package of the same repository (site tools such as "
                   "nccl-tests; the highest version without =VERSION). Repeatable.")
@click.option("--allow-unsigned-upstream", is_flag=True,
              help="Skip the signature check: only for a local repository you control.")
@click.option("--wheel-hashes", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              metavar="FILE",
              help="The site's lock in the stack's place: an inventory file (group_vars) "
                   "that sets framework_wheel_hashes for the stack; the wheels must be "
                   "exactly those.")
@json_option
@handle_errors
def build_cmd(stack_name: str, os_name: str, out: Path, apt_upstream: str | None,
              index_url: str | None, key: Path | None, extra: tuple[str, ...],
              allow_unsigned_upstream: bool, wheel_hashes: Path | None,
              as_json: bool) -> None:
    """Fetch exactly the stack's pinned packages (with the dependencies the same
    repository provides) and its framework wheels into OUT, every file checked
    against the upstream's index, with a manifest of every file's sha256. A locked
    stack's wheels (or the site's lock, --wheel-hashes) are fetched by digest."""
    from nodecert.provision.locks import read_site_lock
    from nodecert.provision.mirror import build

    site_lock = read_site_lock(wheel_hashes, stack_name) if wheel_hashes else None
    m = build(stack_name, os_name, out, apt_upstream=apt_upstream, index_url=index_url,
              key=key, allow_unsigned=allow_unsigned_upstream, extra=extra,
              site_lock=site_lock)
    if as_json:
        emit_json({"out": str(out), **m})
        return
    roles = [p["role"] for p in m["packages"]]
    echo(f"mirror of {m['stack']} for {m['os']} in {out}: {len(m['packages'])} packages "
         f"({roles.count('pinned')} pinned, {roles.count('extra')} extra, "
         f"{roles.count('dependency')} dependencies), "
         f"{len(m['wheels'])} wheels, {len(m['files'])} files; signature: {m['signature']}")
    for dep in m["from_os_archive"]:
        echo(f"  from the OS archive (not mirrored): {dep}")
    echo(f"provision with: --mirror <URL or path where {out} is served>")


@mirror.command("verify")
@click.argument("directory", type=click.Path(path_type=Path, exists=True, file_okay=False))
@json_option
@handle_errors
def verify_cmd(directory: Path, as_json: bool) -> None:
    """Check every file of a built mirror against its manifest and the indexes."""
    from nodecert.provision.mirror import read_manifest, verify

    problems = verify(directory)
    m = read_manifest(directory)
    if as_json:
        emit_json({"mirror": str(directory), "ok": not problems, "files": len(m["files"]),
                   "problems": problems})
    else:
        for p in problems:
            echo(f"  {p}")
        echo(f"{directory}: {len(m['files'])} files, "
             + ("all match the manifest" if not problems else f"{len(problems)} problem(s)"))
    sys.exit(ExitCode.FAILED if problems else ExitCode.OK)
