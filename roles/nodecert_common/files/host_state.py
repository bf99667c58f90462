# Reads, in one process, the state a role's file, directory and service tasks would each
# find on their own: a role whose every item is already in place skips those tasks (an
# idempotent re-run costs a module run per task, even one that changes nothing).
# Read-only; Python 3.8+ standard library only (it runs on the node).
#
# argv[1]: JSON {"paths": [...], "text": [...], "units": [...],
#                "run": {"name": {"argv": [...], "timeout": seconds, "check": bool}}}
# stdout: JSON {"paths": {path: state}, "mtime": {path: seconds}, "text": {path: str|null},
#               "units": {unit: "<UnitFileState> <ActiveState> <NeedDaemonReload>"},
#               "run": {name: {"rc", "stdout", "stdout_lines", "stderr"}}, "now": seconds}
# A path's state is one line a task's expectation is compared with as a whole:
#   "file <mode> <owner> <group> <sha256>", "directory <mode> <owner> <group>",
#   "link <target>", "missing", or "other <mode>".
import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys
import time

TEXT_LIMIT = 1 << 20


def _name(table, ident):
    try:
        return table(ident)[0]
    except KeyError:
        return str(ident)


def path_state(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing", None
    except NotADirectoryError:
        return "missing", None
    mode = "%04o" % stat.S_IMODE(st.st_mode)
    who = "%s %s" % (_name(pwd.getpwuid, st.st_uid), _name(grp.getgrgid, st.st_gid))
    if stat.S_ISLNK(st.st_mode):
        return "link " + os.readlink(path), st.st_mtime
    if stat.S_ISDIR(st.st_mode):
        return "directory %s %s" % (mode, who), st.st_mtime
    if stat.S_ISREG(st.st_mode):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return "file %s %s %s" % (mode, who, digest.hexdigest()), st.st_mtime
    return "other " + mode, st.st_mtime


def read_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read(TEXT_LIMIT + 1)
    except OSError:
        return None
    if len(data) > TEXT_LIMIT:
        return None
    return data.decode("utf-8", "replace")


def unit_states(units, timeout):
    out = {u: "unknown unknown unknown" for u in units}
    if not units:
        return out
    try:
        proc = subprocess.run(
            ["systemctl", "show", "--property=Id,UnitFileState,ActiveState,NeedDaemonReload",
             "--"] + list(units),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return out
    # One block of KEY=VALUE lines per unit, in the order asked, blank-line separated.
    blocks = proc.stdout.decode("utf-8", "replace").strip().split("\n\n")
    if proc.returncode != 0 or len(blocks) != len(units):
        return out
    for unit, block in zip(units, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        out[unit] = "%s %s %s" % (props.get("UnitFileState") or "none",
                                  props.get("ActiveState") or "unknown",
                                  props.get("NeedDaemonReload") or "unknown")
    return out


def run(spec):
    try:
        proc = subprocess.run(spec["argv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=spec.get("timeout", 120), check=False)
    except FileNotFoundError as exc:
        return {"rc": 127, "stdout": "", "stdout_lines": [], "stderr": str(exc)}
    except OSError as exc:  # not executable, a directory: what a shell answers with 126
        return {"rc": 126, "stdout": "", "stdout_lines": [], "stderr": str(exc)}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stdout_lines": [],
                "stderr": "timed out after %ss" % spec.get("timeout", 120)}
    text = proc.stdout.decode("utf-8", "replace").rstrip("\n")
    return {"rc": proc.returncode, "stdout": text, "stdout_lines": text.splitlines(),
            "stderr": proc.stderr.decode("utf-8", "replace")[-4000:]}


def main():
    request = json.loads(sys.argv[1])
    paths, mtimes = {}, {}
    for p in request.get("paths", []):
        paths[p], mtimes[p] = path_state(p)
    result = {
        "paths": paths,
        "mtime": mtimes,
        "text": {p: read_text(p) for p in request.get("text", [])},
        "units": unit_states(request.get("units", []), request.get("timeout", 60)),
        "run": {name: run(spec) for name, spec in request.get("run", {}).items()},
        "now": time.time(),
    }
    json.dump(result, sys.stdout, sort_keys=True)
    # A command the role cannot do without ("check"): its failure fails the read.
    failed = [name for name, spec in request.get("run", {}).items()
              if spec.get("check") and result["run"][name]["rc"] != 0]
    for name in failed:
        sys.stderr.write("%s failed (rc %s): %s\n" % (" ".join(request["run"][name]["argv"]),
                                                     result["run"][name]["rc"],
                                                     result["run"][name]["stderr"].strip()))
    return 1 if failed else 0


sys.exit(main())
