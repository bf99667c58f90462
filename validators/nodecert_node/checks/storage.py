"""storage.fio: sequential/random bandwidth and a checkpoint write, never destroying data.
storage.shared: the order's shared file system (nodecert_node/sharedfs.py).

Directory targets: fio writes only files in a fresh subdirectory it creates under
the scratch directory, after checking free space, and removes them afterwards.
Raw block devices: only when the device is named in allow_raw_devices AND is
proven empty (not mounted, no partitions, holders or swap, no known signature,
blkid finds nothing, and its first and last MiB are all zero bytes).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import struct
from typing import Any

from nodecert_node import gpu, scaling, sharedfs
from nodecert_node.context import Ctx, NoGpu, judge_findings
from nodecert_node.contract import Evidence, Limits, Result, Threshold, Verdict
from nodecert_node.parse import fio
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, remove_on_stop, run

MiB = 1024 * 1024

# (offset, magic, what) -- well-known on-disk signatures (as libblkid/wipefs probe them).
SIGNATURES: list[tuple[int, bytes, str]] = [
    (512, b"EFI PART", "GPT partition table"),
    (4096, b"EFI PART", "GPT partition table (4K sectors)"),
    (1080, b"\x53\xef", "ext2/3/4 filesystem"),
    (0, b"XFSB", "XFS filesystem"),
    (65600, b"_BHRfS_M", "btrfs filesystem"),
    (4086, b"SWAPSPACE2", "swap area"),
    (4086, b"SWAP-SPACE", "swap area"),
    (536, b"LABELONE", "LVM physical volume"),
    (512 + 24, b"LVM2 001", "LVM physical volume"),
    (0, b"LUKS\xba\xbe", "LUKS encrypted volume"),
    (4096, struct.pack("<I", 0xA92B4EFC), "Linux md RAID member"),
    (3, b"NTFS    ", "NTFS filesystem"),
    (82, b"FAT32   ", "FAT32 filesystem"),
    (54, b"FAT1", "FAT filesystem"),
    (32769, b"CD001", "ISO9660 filesystem"),
]


def signatures(head: bytes) -> list[str]:
    """Known signatures in the first bytes of a device (pure)."""
    found = [what for off, magic, what in SIGNATURES if head[off:off + len(magic)] == magic]
    if len(head) >= 512 and head[510:512] == b"\x55\xaa" and any(head[446:510]):
        found.append("MBR partition table")
    return sorted(set(found))


def raw_device_problems(dev: str, allowed: list[str], facts: dict[str, Any]) -> list[str]:
    """Why nodecert may not write to dev; [] only when allowed AND proven empty (pure)."""
    if dev not in allowed:
        return [f"{dev} is a raw device and is not listed in allow_raw_devices "
                "(nodecert writes only to a scratch directory unless told otherwise)"]
    if not facts.get("is_block"):
        return [f"{dev} is not a block device"]
    problems = []
    for key, what in (("mounts", "mounted at"), ("partitions", "has partitions"),
                      ("holders", "is in use by"), ("swap", "is active swap")):
        if facts.get(key):
            problems.append(f"{dev} {what} {', '.join(facts[key])}")
    sigs = facts.get("signatures") or []
    if sigs:
        problems.append(f"{dev} carries {', '.join(sigs)}")
    if facts.get("blkid"):
        problems.append(f"blkid finds {facts['blkid']} on {dev}")
    if facts.get("nonzero"):
        problems.append(f"{dev} holds data (non-zero bytes in its first/last MiB)")
    return problems


def probe_device(dev: str, timeout: float) -> dict[str, Any]:
    facts: dict[str, Any] = {"is_block": False}
    try:
        st = os.stat(dev)
    except OSError as exc:
        facts["error"] = str(exc)
        return facts
    facts["is_block"] = stat.S_ISBLK(st.st_mode)
    if not facts["is_block"]:
        return facts
    name = os.path.basename(os.path.realpath(dev))
    sysd = f"/sys/class/block/{name}"
    facts["partitions"] = sorted(p for p in (os.listdir(sysd) if os.path.isdir(sysd) else [])
                                 if os.path.exists(f"{sysd}/{p}/partition"))
    facts["holders"] = sorted(os.listdir(f"{sysd}/holders")) if os.path.isdir(
        f"{sysd}/holders") else []
    devs = {os.path.realpath(dev)} | {f"/dev/{p}" for p in facts["partitions"]}
    with open("/proc/mounts") as f:
        facts["mounts"] = sorted({ln.split()[1] for ln in f if ln.split()[0] in devs})
    with open("/proc/swaps") as f:
        facts["swap"] = sorted({ln.split()[0] for ln in f if ln.split()[0] in devs})
    with open(dev, "rb") as f:
        head = f.read(MiB)
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - MiB))
        tail = f.read(MiB)
    facts["size_bytes"] = size
    facts["signatures"] = signatures(head)
    facts["nonzero"] = any(head) or any(tail)
    try:
        out = run(["blkid", "-p", "-o", "export", dev], timeout=timeout, ok_codes=(0, 2))
        facts["blkid"] = " ".join(ln for ln in out.text.splitlines() if ln.startswith(
            ("TYPE=", "PTTYPE="))) if out.returncode == 0 else ""
    except ToolError as exc:
        if exc.kind != "missing":
            raise
    return facts


JOBS = [  # name, fio arguments, measured side
    ("seq_write", ["--rw=write", "--bs=1M"], "write"),
    ("seq_read", ["--rw=read", "--bs=1M"], "read"),
    ("rand_read_4k", ["--rw=randread", "--bs=4k"], "read"),
]


def fio_argv(job: str, args: list[str], target: str, opts: dict[str, Any], *,
             raw: bool) -> list[str]:
    argv = ["fio", f"--name={job}", "--output-format=json", "--direct=1",
            f"--ioengine={opts.get('ioengine', 'libaio')}",
            f"--iodepth={opts.get('iodepth', 32) if job.startswith('rand') else 8}",
            f"--numjobs={opts.get('numjobs', 1)}", "--group_reporting", "--time_based",
            f"--runtime={opts.get('runtime_s', 10)}", f"--size={opts.get('size_mb', 1024)}M",
            "--randrepeat=0", *args]
    argv.append(f"--filename={target}" if raw else f"--filename={target}/nodecert-fio.dat")
    return argv


def block_device_of(path: str) -> str | None:
    """The kernel name of the block device holding path ("nvme0n1", "sda", "dm-0"), or
    None when it cannot be told (a network or virtual filesystem)."""
    if path.startswith("/dev/"):
        return os.path.basename(os.path.realpath(path))
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    link = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    try:
        return os.path.basename(os.path.realpath(link)) if os.path.exists(link) else None
    except OSError:
        return None


def judge_storage(measured: dict[str, dict[str, float]], limits: Limits,
                  spec: dict[str, Any], devices: dict[str, str | None] | None = None
                  ) -> Result:
    """measured: target -> {seq_read_mbps, seq_write_mbps, rand_read_iops, checkpoint_mbps}.

    devices: target -> block device; a target on local NVMe is also held to the local
    NVMe sequential-read floor (unless the order names the drive's rated figures).
    """
    fails: list[str] = []
    used: dict[str, Threshold] = {}
    devices = devices or {}
    local_floor = limits.get("storage.local_nvme_seq_read_mbps_min") if limits.has(
        "storage.local_nvme_seq_read_mbps_min") else None
    if local_floor is not None and not spec.get("nvme_rated_seq_read_mbps"):
        for target, m in measured.items():
            dev = devices.get(target) or ""
            if dev.startswith("nvme") and "seq_read_mbps" in m:
                used["local_nvme_seq_read_mbps"] = local_floor
                outcome = local_floor.check(round(m["seq_read_mbps"], 1))
                if not outcome.ok:
                    fails.append(f"{target} (local NVMe {dev}) seq read: {outcome.message} "
                                 f"({local_floor.origin})")
    fraction = float(limits.value("storage.rated_fraction", 0.85))
    frac_src = limits.get("storage.rated_fraction").source if limits.has(
        "storage.rated_fraction") else ""
    for metric, rated_key, unit in (("seq_read_mbps", "nvme_rated_seq_read_mbps", "MB/s"),
                                    ("seq_write_mbps", "nvme_rated_seq_write_mbps", "MB/s"),
                                    ("rand_read_iops", "nvme_rated_rand_read_iops", "IOPS"),
                                    ("checkpoint_mbps", "", "MB/s")):
        if rated_key and spec.get(rated_key):
            t = Threshold(round(float(spec[rated_key]) * fraction, 1), ">=", unit,
                          f"inventory {rated_key}={spec[rated_key]} x {fraction:g}",
                          frac_src)
        elif limits.has(f"storage.{metric}_min"):
            t = limits.get(f"storage.{metric}_min")
        else:
            continue
        used[metric] = t
        for target, m in measured.items():
            if metric in m:
                outcome = t.check(round(m[metric], 1))
                if not outcome.ok:
                    fails.append(f"{target} {metric.replace('_', ' ')}: {outcome.message} "
                                 f"({t.origin})")
    summary = "; ".join(
        f"{t}: read {m.get('seq_read_mbps', 0):.0f} MB/s, write "
        f"{m.get('seq_write_mbps', 0):.0f} MB/s, 4k {m.get('rand_read_iops', 0):.0f} IOPS, "
        f"checkpoint {m.get('checkpoint_mbps', 0):.0f} MB/s" for t, m in measured.items())
    return judge_findings("storage.fio", fails, [], summary, value=measured, unit="MB/s|IOPS",
                          thresholds=used, fault_code="NC-STORAGE-SLOW" if fails else "",
                          remediation="Check the drive's health (nvme smart-log), firmware, "
                                      "PCIe link and RAID/filesystem settings; compare with "
                                      "the datasheet." if fails else "")


WORK_PREFIX = "nodecert-fio-"  # + the check process's pid: the runner cleans up by it


def scratch_problem(target: str) -> str | None:
    """Why the scratch directory cannot be trusted with root's writes, or None.

    Not a symlink (it could point anywhere), owned by root or by us, and not writable by
    others unless sticky (someone else could swap what we create there)."""
    if os.path.islink(target):
        return f"{target} is a symlink: name the real directory"
    st = os.stat(target)
    if not stat.S_ISDIR(st.st_mode):
        return f"{target} is not a directory"
    if st.st_uid not in (0, os.geteuid()):
        return f"{target} belongs to uid {st.st_uid}, not to root"
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        return f"{target} is writable by everyone"
    return None


def _measure_dir(target: str, opts: dict[str, Any], timeout: float,
                 ev: list[Evidence]) -> dict[str, float]:
    need = (int(opts.get("size_mb", 1024)) + int(opts.get("checkpoint_mb", 1024))) * MiB
    if not os.path.islink(target):
        os.makedirs(target, mode=0o700, exist_ok=True)
    problem = scratch_problem(target)
    if problem:
        raise ToolError(f"refusing to write test files: {problem}", kind="failed")
    vfs = os.statvfs(target)
    free = vfs.f_bavail * vfs.f_frsize
    if free < need * 1.1 + 256 * MiB:
        raise ToolError(f"{target} has {free // MiB} MiB free, the storage test needs "
                        f"{int(need * 1.1) // MiB + 256} MiB: free space or lower "
                        "storage size_mb/checkpoint_mb", kind="failed")
    # a fresh directory only we can write: fio's files in it cannot be planted links
    work = os.path.join(target, f"{WORK_PREFIX}{os.getpid()}")
    os.mkdir(work, 0o700)
    remove_on_stop(work)
    try:
        m = _run_jobs(work, opts, timeout, ev, raw=False)
        ck = ["fio", "--name=checkpoint", "--output-format=json", "--rw=write", "--bs=1M",
              f"--size={opts.get('checkpoint_mb', 1024)}M", "--end_fsync=1",
              "--ioengine=psync", f"--filename={work}/checkpoint.dat"]
        out = run(ck, timeout=timeout, name="fio checkpoint")
        ev.append(out.evidence)
        job = fio.parse_fio(out.text)[0]
        # fio's bandwidth for a job with end_fsync covers the fsync: the data is on disk.
        m["checkpoint_mbps"] = _figure(job, "write", "bw_bytes", "checkpoint", out) / 1e6
        return m
    finally:
        shutil.rmtree(work, ignore_errors=False)


def _run_jobs(target: str, opts: dict[str, Any], timeout: float, ev: list[Evidence], *,
              raw: bool) -> dict[str, float]:
    m: dict[str, float] = {}
    for job, args, side in JOBS:
        if raw and side == "write" and not opts.get("raw_write_ok"):
            continue
        out = run(fio_argv(job, args, target, opts, raw=raw), timeout=timeout,
                  name=f"fio {job}")
        ev.append(out.evidence)
        r = fio.parse_fio(out.text)[0]
        if r["error"]:
            raise ToolError(f"fio {job} reported error {r['error']}", out.evidence)
        if job == "rand_read_4k":
            m["rand_read_iops"] = _figure(r, "read", "iops", job, out)
        else:
            m[f"{job}_mbps"] = _figure(r, side, "bw_bytes", job, out) / 1e6
    return m


def _figure(job: dict[str, Any], side: str, key: str, name: str, out: Any) -> float:
    """A figure fio reported for the job, or ToolError: an absent figure is never 0."""
    value = job[side][key]
    if value is None:
        raise ToolError(f"fio {name} reported no {side} {key}: nothing was measured",
                        out.evidence)
    return float(value)


@check("storage.fio", order=40, suites=("quick", "standard", "full", "lab"),
       tools=("fio",),
       description="sequential, random and checkpoint I/O on the allowed scratch targets")
def storage_fio(ctx: Ctx) -> Result:
    opts = dict(ctx.options.get("storage") or {})
    targets = list(opts.get("targets") or ["/var/lib/nodecert/scratch"])
    allowed = list(opts.get("allow_raw_devices") or [])
    timeout = float(opts.get("runtime_s", 10)) + 120
    ev: list[Evidence] = []
    measured: dict[str, dict[str, float]] = {}
    devices = {t: block_device_of(t) for t in targets}
    for target in targets:
        if target.startswith("/dev/"):
            # Held exclusively (O_EXCL) from the emptiness probe to the end of the last
            # write: nothing can mount it or claim it in between.
            hold, busy = -1, ""
            if target in allowed:
                try:
                    hold = os.open(target, os.O_RDONLY | os.O_EXCL)
                except OSError as exc:
                    busy = f"{target} is in use (mounted, or held by another program)" \
                        if exc.errno == errno.EBUSY else f"{target}: {exc.strerror}"
            try:
                problems = [busy] if busy else raw_device_problems(
                    target, allowed, probe_device(target, ctx.timeout))
                if problems:
                    return Result("storage.fio", Verdict.ERROR,
                                  f"refused to write to {target}: {problems[0]}",
                                  findings=tuple(problems), evidence=tuple(ev),
                                  fault_code="NC-STORAGE-REFUSED",
                                  remediation="Name a scratch directory instead, or list an "
                                              "empty device in allow_raw_devices (wipe it "
                                              "yourself first if its data is truly "
                                              "disposable).")
                measured[target] = _run_jobs(target, dict(opts, raw_write_ok=True), timeout,
                                             ev, raw=True)
            finally:
                if hold >= 0:
                    os.close(hold)
        else:
            measured[target] = _measure_dir(target, opts, timeout, ev)
    return judge_storage(measured, ctx.limits, ctx.spec, devices).with_(evidence=tuple(ev))




@check("storage.shared", order=41, suites=("standard", "full", "lab"), tools=("fio",),
       description="the shared file system of the order: mounted as ordered, sequential "
                   "read, checkpoint write, small-file reads")
def storage_shared(ctx: Ctx) -> Result:
    spec = ctx.spec.get("shared_fs")
    if not spec:
        return Result("storage.shared", Verdict.PASS, "the order names no shared file "
                      "system (nodecert_shared_fs): nothing to test")
    opts = dict(ctx.options.get("storage") or {})
    size_mb = int(spec.get("size_mb") or opts.get("size_mb", 1024))
    # A checkpoint of the reference model (weights and AdamW state, 16 bytes a parameter)
    # unless the order names its size.
    checkpoint_mb = int(spec.get("checkpoint_mb") or checkpoint_size_mb(ctx))
    timeout = float(opts.get("runtime_s", 10)) + 600
    ev: list[Evidence] = []
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            mounts_text = f.read()
    except OSError as exc:
        return Result("storage.shared", Verdict.ERROR, f"cannot read /proc/mounts: {exc}",
                      fault_code="NC-LOAD-ERROR")
    ev.append(Evidence.of("/proc/mounts", "cat /proc/mounts", 0, mounts_text, 0.0))
    problems: list[str] = []
    measured: dict[str, dict[str, Any]] = {}
    gds = sharedfs.gdsio_path()  # GPUDirect Storage where NVIDIA's GDS tools are installed
    for m in spec["mounts"]:
        problem = sharedfs.mount_problem(m, sharedfs.mount_of(m["path"], mounts_text))
        if problem:
            problems.append(problem)
            continue
        try:
            measured[m["path"]] = sharedfs.measure(
                m["path"], f"nodecert-{ctx.plan.run_id[-12:]}-{ctx.plan.host}",
                sizes=(size_mb, checkpoint_mb), timeout=timeout, ev=ev, gds=gds)
        except ToolError as exc:
            return Result("storage.shared", Verdict.ERROR, str(exc), evidence=tuple(ev),
                          fault_code="NC-LOAD-ERROR",
                          remediation="Read fio's output in the evidence; fix the mount or "
                                      "the sizes and re-run.")
    res = sharedfs.judge(measured, problems, spec)
    return res.with_(evidence=tuple(ev), facts={"checkpoint_mb": checkpoint_mb,
                                                "size_mb": size_mb, "gdsio": gds or ""})


def checkpoint_size_mb(ctx: Ctx) -> int:
    """The reference model's checkpoint for this node's GPUs (load.scaling's model)."""
    try:
        _, gpus, _ = gpu.inventory(ctx)
    except NoGpu:
        return 1024
    size = scaling.model_size(min(float(g.get("memory_total_mib") or 0) for g in gpus))
    return scaling.checkpoint_mb(size)
