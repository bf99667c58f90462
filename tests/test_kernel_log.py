"""Kernel log on real-world variants: every timestamp style, multi-line records, GPU loss
without any Xid, the journal when dmesg is restricted or wrapped (health.xid)."""

from __future__ import annotations

import calendar
import json
import textwrap
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert_node.checks import health
from nodecert_node.checks.health import judge_xids, load_catalog
from nodecert_node.contract import Evidence, Limits, Verdict
from nodecert_node.parse import kernel
from nodecert_node.tools import Output, ToolError
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real" / "dmesg"
CAT = load_catalog()
LIMITS = Limits({})
NOW = calendar.timegm((2026, 11, 30, 12, 0, 0, 0, 0, 0))


def real(name: str) -> str:
    return (REAL / name).read_text()


def judge(events: list[dict[str, Any]], now: float = NOW, **kw: Any) -> Any:
    return judge_xids(events, CAT, [{"bus_id": "00000000:19:00.0"}], now=now, window_h=24,
                      limits=LIMITS, **kw)


# --- every real file: the events read and the verdict they get --------------------------

@pytest.mark.parametrize(("name", "kinds"), [
    ("xid48-dbe-xid63-row-remap-xid94-contained-dmesg-time-format-iso-peermem.txt",
     [48, 63] + [94] * 9),
    ("rtx-pro-6000-blackwell-journalctl-k-xid48-xid171-xid63-xid154-drain-reset-EXCERPT.txt",
     [48, 171, 48, 63, 154]),
    ("journalctl-xid13-graphics-exception-xid31-mmu-fault-injected.txt", [13, 31]),
    ("k8s-gpu-node-journalctl-k-short-iso-no-xid.txt", []),
    ("asrockrack-genoa-gpu-node-pstore-erst-panic1-part1-raw-loglevels.txt", []),
    ("xeon-e5v4-host-journalctl-pcie-aer-uncorrected-fatal-cmpltto-nvidia-cant-recover.txt",
     ["gpu_lost"]),
    ("h100-dell-xe9680-xid119-gsp-rpc-timeout-dmesg-T.txt", [119] * 5),
])
def test_real_logs_events_and_times(name: str, kinds: list[Any]) -> None:
    events = kernel.parse_kernel_log(real(name), boot_time=NOW - 3600, now=NOW)
    assert [e["xid"] if e["kind"] == "xid" else e["kind"] for e in events] == kinds
    assert all(e["time"] is not None for e in events)  # every stamp style is read


def test_iso_dmesg_times_are_exact() -> None:
    (first, *_) = kernel.parse_kernel_log(real(
        "xid48-dbe-xid63-row-remap-xid94-contained-dmesg-time-format-iso-peermem.txt"))
    assert first["time"] == pytest.approx(calendar.timegm((2024, 11, 15, 12, 2, 3)) + 0.470068)
    assert first["pci"] == "0000:19:00"


def test_short_iso_journal_offset_without_colon() -> None:
    line = "2025-01-17T17:10:43+0200 node kernel: NVRM: Xid (PCI:0000:19:00): 79, GPU has " \
           "fallen off the bus."
    (e,) = kernel.parse_xids(line)
    assert e["time"] == calendar.timegm((2025, 1, 17, 15, 10, 43)) and e["xid"] == 79


def test_syslog_stamp_year_is_the_latest_not_in_the_future() -> None:
    line = "Dec 31 23:59:00.250000 node kernel: NVRM: Xid (PCI:0000:19:00): 79, x"
    # read on 2026-11-30: Dec 31 must be last year's, not a date a month ahead
    (e,) = kernel.parse_xids(line, now=NOW)
    assert e["time"] is not None and e["time"] < NOW
    assert abs(e["time"] - calendar.timegm((2025, 12, 31, 23, 59, 0))) <= 14 * 3600 + 1


@pytest.mark.parametrize("verdict_name", ["FAIL"])
def test_real_fatal_xids_fail_with_iso_and_journal_stamps(verdict_name: str) -> None:
    """The ISO and journal captures hold fatal Xids (48 DBE, 63, 154): recent -> FAIL."""
    iso = kernel.parse_kernel_log(real(
        "xid48-dbe-xid63-row-remap-xid94-contained-dmesg-time-format-iso-peermem.txt"))
    assert judge(iso, now=iso[-1]["time"] + 60).verdict.name == verdict_name
    j = kernel.parse_kernel_log(real(
        "rtx-pro-6000-blackwell-journalctl-k-xid48-xid171-xid63-xid154-drain-reset-EXCERPT.txt"
    ), now=NOW)
    r = judge_xids(j, CAT, [], now=j[0]["time"] + 60, window_h=24, limits=LIMITS)
    assert r.verdict is Verdict.FAIL and "Xid 48" in r.summary


def test_gpu_lost_without_xid_fails_the_node() -> None:
    ev = kernel.parse_kernel_log(real(
        "xeon-e5v4-host-journalctl-pcie-aer-uncorrected-fatal-cmpltto-nvidia-cant-recover.txt"
    ), now=NOW)
    r = judge_xids(ev, CAT, [{"bus_id": "00000000:03:00.0"}], now=ev[0]["time"] + 60,
                   window_h=24, limits=LIMITS)
    assert r.verdict is Verdict.FAIL
    assert r.summary.startswith("GPU lost on GPU0 00000000:03:00.0 (PCIe error the driver "
                                "cannot recover, no Xid)")


@pytest.mark.parametrize("line", [
    "[  812.123456] NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.",
    "[  812.123456] NVRM: GPU 0000:19:00.0: RmInitAdapter failed! (0x26:0x65:1457)",
    "[  812.123456] NVRM: rm_init_adapter failed, device minor number 0",
    "[  812.123456] nvidia: probe of 0000:19:00.0 failed with error -1",
    "[  812.123456] NVRM: The NVIDIA probe routine failed for 1 device(s).",
    "[  812.123456] NVRM: None of the NVIDIA devices were initialized.",
])
def test_gpu_loss_messages_fail(line: str) -> None:
    (e,) = kernel.parse_kernel_log(line, boot_time=NOW - 900)
    assert e["kind"] == "gpu_lost"
    assert judge([e]).verdict is Verdict.FAIL


def test_benign_nvidia_lines_are_not_gpu_loss() -> None:
    log = ("[    4.9] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.105.08\n"
           "[    5.0] nvidia 0000:19:00.0: enabling device (0000 -> 0002)\n"
           "[    5.1] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid "
           "context, skipping further processing\n")
    assert kernel.parse_kernel_log(log) == []


def test_unreadable_time_counts_as_recent_never_downgraded() -> None:
    """A fatal Xid without a readable stamp (dmesg -t, a mangled prefix) FAILs."""
    for line in ("NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.",
                 "[  120.5] NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus."):
        (e,) = kernel.parse_xids(line)  # relative stamp and no boot time: unknown
        assert e["time"] is None
        r = judge([e])
        assert r.verdict is Verdict.FAIL and "time not readable" in r.summary


def test_unreadable_xid_code_is_named_not_dropped() -> None:
    (e,) = kernel.parse_kernel_log("[ 1.0] NVRM: Xid (PCI:0000:19:00): ", boot_time=NOW)
    assert e["xid"] is None
    r = judge([e])
    assert r.verdict is Verdict.WARN and "unreadable Xid line" in r.summary


def test_multiline_record_joins_continuation() -> None:
    log = ("[  120.500000] NVRM: Xid (PCI:0000:19:00):\n"
           "               79, pid=1, name=python3, GPU has fallen\n"
           "               off the bus.\n"
           "[  121.000000] next record\n")
    (e,) = kernel.parse_xids(log, boot_time=1000.0)
    assert (e["xid"], e["time"]) == (79, 1120.5)
    assert e["message"].endswith("GPU has fallen off the bus.")


def test_journal_json_records() -> None:
    recs = [{"__REALTIME_TIMESTAMP": "1764500000123456", "_TRANSPORT": "kernel",
             "MESSAGE": "NVRM: Xid (PCI:0000:19:00): 48, An uncorrectable double bit error"},
            {"__REALTIME_TIMESTAMP": "1764500001000000", "_TRANSPORT": "kernel",
             "MESSAGE": list(b"NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.\xff")}]
    ev = kernel.parse_kernel_log("\n".join(json.dumps(r) for r in recs))
    assert [(e["kind"], e["time"]) for e in ev] == [("xid", 1764500000.123456),
                                                      ("gpu_lost", 1764500001.0)]


def test_old_fatal_is_warn_recent_fatal_is_fail() -> None:
    (e,) = kernel.parse_xids("[  120.5] NVRM: Xid (PCI:0000:19:00): 79, x", boot_time=NOW)
    assert judge([e], now=NOW + 120.5 + 60).verdict is Verdict.FAIL
    assert judge([e], now=NOW + 3 * 86400).verdict is Verdict.WARN


def test_wrapped_ring_buffer_without_journal_warns_of_the_gap() -> None:
    log = "[ 50000.0] eth0: link up\n"
    start = kernel.coverage_start(log, boot_time=NOW - 60000)
    assert start == NOW - 10000
    r = judge([], now=NOW, covered_from=start)
    assert r.verdict is Verdict.WARN and "ring buffer wrapped" in r.summary
    assert kernel.coverage_start("[ 0.0] Linux version 6.8\n[ 1.0] x\n", NOW) is None


# --- where the log is read from ----------------------------------------------------------

def _fake_run(answers: dict[str, Any]) -> Any:
    def run(argv: list[str], **_: Any) -> Output:
        a = answers[argv[0]]
        ev = Evidence.of(argv[0], " ".join(argv), 1 if isinstance(a, Exception) else 0,
                         "" if isinstance(a, Exception) else a)
        if isinstance(a, Exception):
            raise ToolError(str(a), ev)
        return Output(a, ev)
    return run


def test_restricted_dmesg_falls_back_to_the_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    jline = json.dumps({"__REALTIME_TIMESTAMP": "1764500000000000", "MESSAGE":
                        "NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus."})
    monkeypatch.setattr(health, "run", _fake_run({
        "dmesg": RuntimeError("dmesg: read kernel buffer failed: Operation not permitted"),
        "journalctl": jline}))
    text, ev, complete = health.read_kernel_log(5)
    assert complete and [e["xid"] for e in kernel.parse_xids(text)] == [79]
    assert [e.name for e in ev][-1] == "journalctl"


def test_wrapped_dmesg_reads_the_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "run", _fake_run({"dmesg": "[ 9000.0] late line\n",
                                                   "journalctl": "{}\n"}))
    _, ev, complete = health.read_kernel_log(5)
    assert complete and [e.name for e in ev] == ["dmesg", "journalctl"]


def test_neither_source_readable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "run", _fake_run({"dmesg": RuntimeError("denied"),
                                                   "journalctl": RuntimeError("no journal")}))
    with pytest.raises(ToolError, match="neither dmesg nor journalctl"):
        health.read_kernel_log(5)


# --- property-based: re-stamp, re-wrap, re-indent, reorder, truncate ---------------------

XID_LINES = [ln for ln in real(
    "xid48-dbe-xid63-row-remap-xid94-contained-dmesg-time-format-iso-peermem.txt"
).splitlines() if "NVRM: Xid" in ln]
BODIES = [ln.split(" ", 1)[1] for ln in XID_LINES]
STAMPS = {
    "rel": lambda t: f"[{t - (NOW - 86400):12.6f}] ",
    "ctime": lambda t: time.strftime("[%a %b %d %H:%M:%S %Y] ", time.localtime(t)),
    "iso": lambda t: time.strftime("%Y-%m-%dT%H:%M:%S,000000+00:00 ", time.gmtime(t)),
    "short-iso": lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+0000 gpu-node-7 kernel: ",
                                         time.gmtime(t)),
    "short-precise": lambda t: time.strftime("%b %d %H:%M:%S.000123 gpu-node-7 kernel: ",
                                             time.localtime(t)),
    "raw-level": lambda t: f"<4>[{t - (NOW - 86400):12.6f}] ",
}


@settings(max_examples=60, deadline=None)
@given(style=st.sampled_from(sorted(STAMPS)), order=st.permutations(range(len(BODIES))),
       width=st.integers(min_value=20, max_value=200), indent=st.integers(1, 30))
def test_property_restamped_rewrapped_logs_read_the_same(style: str, order: list[int],
                                                         width: int, indent: int) -> None:
    t0 = NOW - 600
    lines = []
    for k, i in enumerate(order):
        body = BODIES[i]
        # a message printed over several lines: continuation lines indented under the
        # stamp, broken where the kernel broke them (between words)
        head, *rest = textwrap.wrap(body, width)
        lines.append(STAMPS[style](t0 + k) + head)
        lines.extend(" " * indent + part for part in rest)
    ev = kernel.parse_xids("\n".join(lines), boot_time=NOW - 86400, now=NOW)
    assert sorted(e["xid"] for e in ev) == sorted(int(b.split("): ")[1].split(",")[0])
                                                   for b in BODIES)
    assert all(e["time"] is not None and abs(e["time"] - NOW) < 3600 for e in ev)
    assert judge(ev).verdict is Verdict.FAIL  # Xid 48 and 63 are fatal, recent


def test_a_log_cut_inside_an_xid_code_reads_it_as_unreadable_not_smaller() -> None:
    line = "[ 1234.5] NVRM: Xid (PCI:0000:19:00): 4"
    cut = kernel.parse_kernel_log("[ 1200.0] nvidia: loaded\n" + line, boot_time=NOW - 3600)
    assert [(e["kind"], e["xid"]) for e in cut] == [("xid", None)]  # "48" cut to "4"
    r = judge(cut)
    assert "unreadable Xid line" in " ".join((r.summary, *r.findings)), r
    # The same code with what the driver prints after it, or a complete last line: read.
    whole = kernel.parse_kernel_log(line + ", pid=1, name=python", boot_time=NOW - 3600)
    assert [e["xid"] for e in whole] == [4]
    assert [e["xid"] for e in kernel.parse_kernel_log(line + "\n", boot_time=NOW - 3600)] == [4]


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(real(
    "xid48-dbe-xid63-row-remap-xid94-contained-dmesg-time-format-iso-peermem.txt"))))
def test_property_truncated_log_never_invents_or_downgrades(cut: int) -> None:
    text = real("xid48-dbe-xid63-row-remap-xid94-contained-dmesg-time-format-iso-peermem.txt")
    ev = kernel.parse_kernel_log(text[:cut])
    codes = [e["xid"] for e in ev if e["xid"] is not None]
    assert set(codes) <= {48, 63, 94} and all(e["kind"] == "xid" for e in ev)
    if 48 in codes:  # a fatal Xid read from a cut file still fails the node
        assert judge(ev, now=max(e["time"] for e in ev) + 60).verdict is Verdict.FAIL


# --- dmesg --decode and raw level prefixes before every stamp style ----------------------

PREFIXES = {
    "none": "",
    "raw": "<4>",
    "decode": "kern  :warn  : ",
    "decode-err": "kern  :err   : ",
    "decode-user": "user  :info  : ",
}
BOOT = NOW - 40 * 86400  # up for 40 days: a relative stamp reaches back that far
DECODE_STYLES = {"rel": lambda t: f"[{t - BOOT:12.6f}] ", "ctime": STAMPS["ctime"],
                 "iso": STAMPS["iso"]}


def test_an_old_fatal_xid_behind_a_decode_prefix_keeps_its_time() -> None:
    """`dmesg --decode --time-format=iso`: the facility/level prefix before the ISO stamp.
    The Xid is a week old: out of the window, never read as recent."""
    week_ago = NOW - 7 * 86400
    line = (PREFIXES["decode"] + STAMPS["iso"](week_ago)
            + "NVRM: Xid (PCI:0000:19:00): 79, pid=1234, GPU has fallen off the bus.")
    (e,) = kernel.parse_xids(line, now=NOW)
    assert e["time"] == week_ago and e["xid"] == 79
    r = judge([e])
    assert r.verdict is Verdict.WARN and "before the window" in r.summary


@settings(max_examples=60, deadline=None)
@given(prefix=st.sampled_from(sorted(PREFIXES)), style=st.sampled_from(sorted(DECODE_STYLES)),
       age_h=st.integers(min_value=0, max_value=24 * 30))
def test_property_every_prefix_before_every_stamp_keeps_the_time(prefix: str, style: str,
                                                                 age_h: int) -> None:
    t = NOW - age_h * 3600
    text = "\n".join(PREFIXES[prefix] + DECODE_STYLES[style](t) + body for body in BODIES)
    ev = kernel.parse_xids(text, boot_time=BOOT, now=NOW)
    assert len(ev) == len(BODIES)
    assert all(e["time"] is not None and abs(e["time"] - t) < 1 for e in ev)
    assert judge(ev).verdict is (Verdict.FAIL if age_h <= 24 else Verdict.WARN)


# The driver's GPU-loss message as one record (continuation lines) and split into one
# record per line, as a journal or a re-flowed capture delivers it.
FELL_OFF = ["NVRM: The NVIDIA GPU 0000:b3:00.0",
            "NVRM: (PCI ID: 10de:26b5) installed in this system has",
            "NVRM: fallen off the bus and is not responding to commands."]


@pytest.mark.parametrize("text", [
    "[ 1843.308145] " + "\n               ".join(FELL_OFF) + "\n",
    "".join(f"[ 1843.30814{k}] {line}\n" for k, line in enumerate(FELL_OFF)),
    "".join(f"Dec 01 10:0{k}:01 node7 kernel: {line}\n" for k, line in enumerate(FELL_OFF[:1]))
    + "".join(f"Dec 01 10:00:02 node7 kernel: {line}\n" for line in FELL_OFF[1:]),
    "".join(f"<3>[ 1843.30814{k}] {line}\n" for k, line in enumerate(FELL_OFF)),
])
def test_a_gpu_loss_split_over_records_names_its_gpu(text: str) -> None:
    """Split over records, the message still FAILs, and it names the GPU its neighbouring
    NVRM record of the same burst gives, not "GPU at unknown"."""
    ev = [e for e in kernel.parse_kernel_log(text, boot_time=NOW - 2000, now=NOW)
          if e["kind"] == "gpu_lost"]
    assert [e["pci"] for e in ev] == ["0000:b3:00"], ev
    r = judge_xids(ev, CAT, [{"bus_id": "00000000:B3:00.0"}], now=NOW, window_h=24,
                   limits=LIMITS)
    assert r.verdict is Verdict.FAIL and "00000000:B3:00.0" in r.summary, r.summary


def test_a_split_gpu_loss_takes_no_address_from_another_burst_or_an_ambiguous_one() -> None:
    far = (f"[  100.000000] {FELL_OFF[0]}\n"
           + "".join(f"[  200.00000{k}] {line}\n" for k, line in enumerate(FELL_OFF[1:])))
    (e,) = kernel.parse_kernel_log(far, boot_time=NOW - 2000, now=NOW)
    assert e["pci"] == "unknown"  # 100 s apart: another burst
    two = (f"[  100.000000] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
           f"[  100.000001] {FELL_OFF[2]}\n"
           f"[  100.000002] NVRM: The NVIDIA GPU 0000:c3:00.0\n")
    (e,) = kernel.parse_kernel_log(two, boot_time=NOW - 2000, now=NOW)
    assert e["pci"] == "unknown"  # two GPUs named as near: which one fell is not known


@given(st.lists(st.sampled_from(["[  500.1] usb 1-1: new device", "[  500.1] eth0: link up",
                                 "[  500.1] mlx5_core 0000:19:00.0: port up"]), max_size=4),
       st.lists(st.sampled_from(["[  500.2] NVRM: The NVIDIA probe routine failed for 1 "
                                 "device(s).", "[  500.2] NVRM: loading NVIDIA UNIX Open "
                                 "Kernel Module for x86_64  570.158.01"]), max_size=2))
def test_unrelated_records_between_do_not_lose_the_address(noise: list[str],
                                                           after: list[str]) -> None:
    """Other drivers' records between the pieces, the driver's next messages after them
    (as the real burst has): the address is still the one the message gave."""
    lines = [f"[  500.1] {FELL_OFF[0]}", *noise, f"[  500.1] {FELL_OFF[1]}",
             f"[  500.1] {FELL_OFF[2]}", *after]
    ev = [e for e in kernel.parse_kernel_log("\n".join(lines) + "\n", boot_time=NOW - 2000,
                                             now=NOW) if e["kind"] == "gpu_lost"]
    assert (ev[0]["message"], ev[0]["pci"]) == ("fallen off the bus", "0000:b3:00")
    # the driver's probe failures after it name the same GPU, or none: never another
    assert {e["pci"] for e in ev[1:]} <= {"0000:b3:00", "unknown"}
