"""The data path through a shared file system (storage.shared, and the cluster's aggregate
read): is each mount the ordered kind, and what does a node get from it -- sequential
read, a checkpoint written and fsync'ed, small files read as a dataloader reads them.

Everything is written in a fresh directory of nodecert's own under the mount point
(nodecert-<run>-<host>, mode 0700, refused if it already exists) and removed afterwards,
also when the run is stopped. Figures are judged against the order's spec
(`nodecert_shared_fs`); a figure the order gives no floor for is reported, not judged.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from nodecert_node.context import judge_findings
from nodecert_node.contract import Evidence, Result, Threshold
from nodecert_node.parse import ParseError, fio
from nodecert_node.parse.gdsio import parse_gdsio
from nodecert_node.tools import ToolError, remove_on_stop, run, which

MiB = 1024 * 1024
SMALL_FILES, SMALL_KIB = 1000, 128  # an image dataset's shard of JPEGs, roughly
# metric -> (the spec's floor key, unit, what it is)
METRICS = {"seq_read_mbps": ("read_mbps_min", "MB/s", "sequential read"),
           "checkpoint_mbps": ("checkpoint_mbps_min", "MB/s", "checkpoint write + fsync"),
           "small_files_per_s": ("small_files_per_s_min", "files/s",
                                 f"{SMALL_KIB} KiB files read"),
           "gds_read_mbps": ("gds_read_mbps_min", "MB/s", "GPUDirect Storage read (gdsio)")}
# Where NVIDIA's GDS packages put gdsio when it is not on PATH.
GDSIO_PATHS = ("/usr/local/cuda/gds/tools/gdsio",)


def mount_of(path: str, mounts_text: str) -> tuple[str, str] | None:
    """(mount point, fstype) of the mount holding path, from /proc/mounts text (pure)."""
    best: tuple[str, str] | None = None
    for line in mounts_text.splitlines():
        f = line.split()
        if len(f) < 3:
            continue
        point = f[1].replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and (
                best is None or len(point) > len(best[0])):
            best = (point, f[2])
    return best


def mount_problem(mount: dict[str, Any], found: tuple[str, str] | None) -> str | None:
    path, want = mount["path"], mount.get("type")
    if found is None or found[0] != path:
        where = f" (it lies on {found[0]})" if found else ""
        return f"{path} is not a mount point{where}: the shared file system is not mounted"
    if want and found[1] != want and not (want == "nfs" and found[1] == "nfs4"):
        return f"{path} is mounted as {found[1]}, the order says {want}"
    return None


def fio_seq_read(work: str, size_mb: int) -> list[str]:
    return ["fio", "--name=seqread", "--output-format=json", "--rw=read", "--bs=1M",
            "--direct=1", "--ioengine=psync", f"--size={size_mb}M",
            f"--filename={work}/seq.dat"]


def fio_checkpoint(work: str, size_mb: int) -> list[str]:
    # fio's bandwidth for a job with end_fsync covers the fsync: the data is on the server.
    return ["fio", "--name=checkpoint", "--output-format=json", "--rw=write", "--bs=4M",
            "--ioengine=psync", "--end_fsync=1", f"--size={size_mb}M",
            f"--filename={work}/checkpoint.dat"]


def fio_small_files(work: str) -> list[str]:
    # one read per file (bs = file size), files in turn: IOPS = files read a second
    return ["fio", "--name=smallfiles", "--output-format=json", "--rw=read",
            f"--bs={SMALL_KIB}k", f"--filesize={SMALL_KIB}k", f"--nrfiles={SMALL_FILES}",
            "--openfiles=16", "--file_service_type=sequential", "--direct=1",
            "--ioengine=psync", f"--directory={work}/small"]


def gdsio_path() -> str | None:
    return which("gdsio") or next((p for p in GDSIO_PATHS if os.access(p, os.X_OK)), None)


def gdsio_argv(exe: str, work: str, size_mb: int, write: bool) -> list[str]:
    """GPU 0, 4 threads, 1 MiB transfers, GPUDirect (-x 0): write the file, then read it."""
    return [exe, "-f", f"{work}/gds.dat", "-d", "0", "-w", "4", "-s", f"{size_mb}M",
            "-i", "1M", "-I", "1" if write else "0", "-x", "0"]


def measure_gds(exe: str, work: str, size_mb: int, timeout: float,
                ev: list[Evidence]) -> tuple[dict[str, float], str]:
    """GPUDirect Storage read and write through the mount: (figures, why none)."""
    got: dict[str, float] = {}
    for write in (True, False):
        try:
            res = run(gdsio_argv(exe, work, size_mb, write), timeout=timeout,
                      name=f"gdsio {'write' if write else 'read'}")
            ev.append(res.evidence)
            line = parse_gdsio(res.text)[-1]
        except (ToolError, ParseError) as exc:
            if isinstance(exc, ToolError) and exc.evidence:
                ev.append(exc.evidence)
            return got, f"gdsio {'write' if write else 'read'}: {exc}"[:300]
        got["gds_write_mbps" if write else "gds_read_mbps"] = float(line["mb_s"])
    return got, ""


def measure(mount: str, work_name: str, *, sizes: tuple[int, int], timeout: float,
            ev: list[Evidence], gds: str | None = None) -> dict[str, Any]:
    """Run the three jobs in a fresh directory under the mount; its figures. sizes: the
    sequential file's and the checkpoint's, in MiB."""
    size_mb, checkpoint_mb = sizes
    need = (size_mb + checkpoint_mb) * MiB + SMALL_FILES * SMALL_KIB * 1024
    vfs = os.statvfs(mount)
    if vfs.f_bavail * vfs.f_frsize < need * 1.1:
        raise ToolError(f"{mount} has {vfs.f_bavail * vfs.f_frsize // MiB} MiB free, the "
                        f"data-path test needs {int(need * 1.1) // MiB} MiB: free space or "
                        "lower size_mb/checkpoint_mb in nodecert_shared_fs", kind="failed")
    work = os.path.join(mount, work_name)
    try:
        os.mkdir(work, 0o700)  # fails if it exists: never write into someone else's files
    except FileExistsError as exc:
        raise ToolError(f"{work} already exists: refusing to write into it (remove it if it "
                        "is a leftover of nodecert's)", kind="failed") from exc
    remove_on_stop(work)
    os.mkdir(os.path.join(work, "small"), 0o700)
    out: dict[str, Any] = {}
    try:
        for key, argv, side in (("seq_read_mbps", fio_seq_read(work, size_mb), "read"),
                                ("checkpoint_mbps", fio_checkpoint(work, checkpoint_mb),
                                 "write"),
                                ("small_files_per_s", fio_small_files(work), "read")):
            res = run(argv, timeout=timeout, name=f"fio {argv[1][7:]} on {mount}")
            ev.append(res.evidence)
            job = fio.parse_fio(res.text)[0]
            if job["error"]:
                raise ToolError(f"fio {argv[1][7:]} on {mount} reported error {job['error']}",
                                res.evidence)
            value = job[side]["iops" if key == "small_files_per_s" else "bw_bytes"]
            if value is None:  # absent is never 0
                raise ToolError(f"fio {argv[1][7:]} on {mount} reported no {side} figure: "
                                "nothing was measured", res.evidence)
            out[key] = value if key == "small_files_per_s" else value / 1e6
        if gds:
            figures, why = measure_gds(gds, work, size_mb, timeout, ev)
            out.update(figures)
            if why:
                out["gds_error"] = why
        return out
    finally:
        shutil.rmtree(work, ignore_errors=False)


def floors(spec: dict[str, Any]) -> dict[str, Threshold]:
    """The order's per-node floors, as thresholds."""
    out = {}
    for metric, (key, unit, _) in METRICS.items():
        if spec.get(key):
            out[metric] = Threshold(spec[key], ">=", unit, f"order spec nodecert_shared_fs."
                                    f"{key}", "the order (inventory nodecert_shared_fs)")
    return out


def judge(measured: dict[str, dict[str, Any]], problems: list[str],
          spec: dict[str, Any]) -> Result:
    """Per mount: mounted as ordered, and each figure against the order's floor (pure).
    A GPUDirect Storage run that failed is a WARN, or a FAIL where the order gives it a
    floor."""
    fails = list(problems)
    warns: list[str] = []
    used = floors(spec)
    for path, m in sorted(measured.items()):
        if m.get("gds_error"):
            (fails if "gds_read_mbps" in used else warns).append(f"{path}: {m['gds_error']}")
        for metric, value in sorted(m.items()):
            t = used.get(metric) if metric in METRICS else None
            if t is not None:
                outcome = t.check(round(value, 1))
                if not outcome.ok:
                    fails.append(f"{path} {METRICS[metric][2]}: {outcome.message}")
    summary = "; ".join(
        f"{p}: read {m.get('seq_read_mbps', 0):.0f} MB/s, checkpoint "
        f"{m.get('checkpoint_mbps', 0):.0f} MB/s, {m.get('small_files_per_s', 0):.0f} "
        f"files/s" + (f", GPUDirect read {m['gds_read_mbps']:.0f} MB/s"
                      if "gds_read_mbps" in m else "")
        for p, m in sorted(measured.items())) or "no mount measured"
    return judge_findings(
        "storage.shared", fails, warns, summary, value=measured, unit="MB/s|files/s",
        thresholds=used, fault_code="NC-SHARED-FS" if fails else "",
        remediation="Check the mount (options, network path to the servers, the client's "
                    "NIC and its MTU) and the file system's own health; compare with the "
                    "other nodes' figures." if fails else "")
