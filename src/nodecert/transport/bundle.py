"""The node code as shipped to a node: a byte-reproducible bundle, and the one script
that installs it (run by `validate` over SSH and by the validators role alike).

`python3 -m nodecert.transport.bundle OUT_DIR` writes the bundle for the validators role and
prints its path, id and install script as JSON.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import shlex
import sys
import tarfile
from pathlib import Path

from nodecert_node.contract import write_atomic

# Where the node code lives on a node, whoever installs it (validate over SSH, or the
# validators role): NODE_BASE/<sha16 of the bundle>/nodecert_node, complete when
# .complete exists, and NODE_BASE/current pointing at the version last installed.
NODE_BASE = "/opt/nodecert/node"
# What provisioning leaves on a node (roles/nodecert_common, record.yml).

def node_code_dir() -> Path:
    """The node package's directory, found without importing it (the control side
    imports only its contract)."""
    spec = importlib.util.find_spec("nodecert_node")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the nodecert_node package is not installed with nodecert")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _trusted_install_test(sha16: str, base: str) -> tuple[str, str]:
    """Shell for `install_script` and `check_script`, so that both judge alike: the test
    that BASE and its parent are safe (else exit 3), and the test (setting ok=1) that
    BASE/<sha16> is a complete install still provably ours."""
    if not all(c in "0123456789abcdef" for c in sha16) or len(sha16) != 16:
        raise ValueError(f"not a bundle id: {sha16!r}")
    b = shlex.quote(base)
    parent = shlex.quote(base.rsplit("/", 1)[0] or "/")
    t = shlex.quote(f"{base}/{sha16}")
    safe = (f"me=$(id -u); "
            # BASE and its parent: ours (or root's), directories, not writable by others
            # (else refuse: someone else would control the code root runs)
            f"for d in {parent} {b}; do if [ -L \"$d\" ] || ! [ -d \"$d\" ] || "
            f"{{ [ \"$(stat -c %u \"$d\")\" != \"$me\" ] && "
            f"[ \"$(stat -c %u \"$d\")\" != 0 ]; }} || "
            f"[ -n \"$(find \"$d\" -maxdepth 0 -perm /022)\" ]; then "
            f"echo \"refusing $d: not a directory owned by root or uid $me without "
            f"group/other write\" >&2; exit 3; fi; done; ")
    complete = (f"ok=0; if [ -f {t}/.complete ] && [ -z \"$(find {t} \\( ! -user \"$me\" "
                f"-o -perm /022 -o -type l \\) -print -quit)\" ] && "
                f"(cd {t} && sha256sum --quiet --strict -c .complete >/dev/null 2>&1); then "
                f"ok=1; fi; ")
    return safe, complete


def install_script(sha16: str, bundle: str, base: str = NODE_BASE) -> str:
    """The shell script that installs the node code on a node: the bundle (a path, or -
    for standard input) extracted into BASE/<sha16>, then `current` pointed at it. `validate`
    runs it over SSH before every run; the validators role runs the very same script.

    Code that runs as root is trusted only when it is provably ours: an install is kept
    only if BASE and every file under the install are owned by the installing user, none
    is writable by group or others, none is a symlink, and every file still matches the
    sha256 list written at extraction (.complete); otherwise it is extracted anew."""
    safe, complete = _trusted_install_test(sha16, base)
    b = shlex.quote(base)
    t = shlex.quote(f"{base}/{sha16}")
    return (f"set -e; umask 022; mkdir -p {b}; {safe}{complete}"
            f"if [ $ok = 0 ]; then rm -rf {t}.tmp; mkdir {t}.tmp; "
            f"tar --no-same-owner --no-same-permissions -xzf {shlex.quote(bundle)} "
            f"-C {t}.tmp; "
            f"(cd {t}.tmp && find . -type f ! -name .complete -print0 | sort -z | "
            f"xargs -0 sha256sum > .complete); "
            f"rm -rf {t}; mv {t}.tmp {t}; echo installed; fi; "
            f"if [ \"$(readlink {b}/current)\" != {sha16} ]; then "
            f"ln -sfn {sha16} {b}/.current.tmp; "
            f"mv -T {b}/.current.tmp {b}/current; echo relinked; fi")


def check_script(sha16: str, base: str = NODE_BASE) -> str:
    """The read-only twin of `install_script`: prints "in place" exactly when that script
    would find nothing to do (the install complete and provably ours, `current` pointing
    at it), "not in place" otherwise (BASE missing or unsafe included). Writes nothing."""
    safe, complete = _trusted_install_test(sha16, base)
    b = shlex.quote(base)
    return (f"if ! [ -d {b} ]; then echo 'not in place'; exit 0; fi; "
            f"( {safe}{complete}[ $ok = 1 ] && [ \"$(readlink {b}/current)\" = {sha16} ] ) "
            f"2>/dev/null && echo 'in place' || echo 'not in place'")


def node_bundle() -> tuple[bytes, str]:
    """The node code as a byte-reproducible tar.gz and its sha256: the same code gives
    the same bundle (and so the same install directory) on every build."""
    src = node_code_dir()
    buf = io.BytesIO()
    # gzip's header carries a timestamp unless told otherwise: mtime=0, no file name.
    with gzip.GzipFile(filename="", fileobj=buf, mode="wb", compresslevel=6, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src.rglob("*")):
            if "__pycache__" in path.parts or path.is_dir():
                continue
            info = tar.gettarinfo(str(path), arcname=str(Path("nodecert_node") /
                                                          path.relative_to(src)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def write_bundle(out_dir: Path) -> dict[str, str]:
    """The bundle as a file for the validators role: its path, id, sha256, install script
    and its read-only check."""
    data, sha = node_bundle()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"nodecert-node-{sha[:16]}.tar.gz"
    if not path.is_file() or path.read_bytes() != data:
        # Whole or not at all: with the free strategy each host may build it at once.
        write_atomic(str(path), data)
    remote = f"{NODE_BASE}/.bundle-{sha[:16]}.tar.gz"
    return {"path": str(path), "sha16": sha[:16], "sha256": sha, "remote": remote,
            "script": install_script(sha[:16], remote), "check": check_script(sha[:16])}


if __name__ == "__main__":  # the validators role: python3 -m nodecert.transport.bundle OUT_DIR
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m nodecert.transport.bundle OUT_DIR")
    print(json.dumps(write_bundle(Path(sys.argv[1]))))


__all__ = ["NODE_BASE", "check_script", "install_script", "node_bundle", "node_code_dir",
           "write_bundle"]
