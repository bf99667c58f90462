"""Scheduled re-validation on the node itself (systemd timer, after-update trigger).

`python3 -m nodecert_node local-run [--suite quick] [--reason timer] [--force]`:

* runs the suite with the plan the control side last sent for it (the runner
  keeps it in /var/lib/nodecert/plans/<suite>.json, so thresholds and the order
  spec are the certified ones); stack.conformance gathers its facts here and is
  judged when the control side collects the run (`nodecert revalidate --collect`),
  which holds the stack manifest -- until then it does not count in the local verdict;
* a run that crashes is recorded as ERROR (history and metrics) and exits 3, which the
  service does not accept as success, so systemd marks the unit failed (a node FAIL
  exits 1, a finding, not a broken unit);
* skips (and says so) while user processes hold the GPUs, unless --force;
* keeps a bounded history in /var/lib/nodecert/history (newest --keep runs);
* writes Prometheus textfile-collector metrics for node_exporter;
* clears the after-update marker that the dpkg hook left;
* with --slurm-drain, drains the node in Slurm on FAIL/ERROR with a reason
  starting "nodecert:", never touches a node someone else drained, and with
  --slurm-resume resumes only its own drain after a passing run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import os
import socket
import stat
import time
from typing import Any

from nodecert_node import state, tools
from nodecert_node.contract import Plan, all_figures, write_atomic
from nodecert_node.idle import GpuUsersUnknown, IdleGuard, gpu_users
from nodecert_node.runner import run_suite

STATE = state.STATE
TEXTFILE = os.environ.get("NODECERT_TEXTFILE_DIR", "/var/lib/prometheus/node-exporter")
PENDING = "revalidate-pending"
VERDICTS = ("PASS", "WARN", "FAIL", "ERROR")
EXIT_FINDING = 1  # the node FAILed or a check ERRORed: the unit still succeeds
EXIT_CRASH = 3  # the run itself broke: the unit fails
NOT_JUDGED = "NC-NOT-JUDGED"  # gathered here, judged by the control side
DRAIN_PREFIX = "nodecert:"


# --- metrics -----------------------------------------------------------------------------

def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(v: float) -> str:
    """A sample value exactly: integers as integers (a Unix time in `%g` loses up to hours),
    other floats in full precision."""
    f = float(v)
    if f.is_integer() and abs(f) < 2 ** 53:
        return str(int(f))
    return repr(f)


def metrics_text(record: dict[str, Any]) -> str:
    """Prometheus text exposition format (version 0.0.4), base units (seconds, bytes)."""
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[dict[str, str], float]]
               ) -> None:
        if not samples:
            return
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{lab}}} {_value(value)}" if lab
                         else f"{name} {_value(value)}")
    results = record.get("results", [])
    family("nodecert_last_run_timestamp_seconds", "gauge",
           "When the last scheduled validation ended (Unix time).", [({}, record["finished"])])
    family("nodecert_last_run_duration_seconds", "gauge", "How long it ran.",
           [({}, record["finished"] - record["started"])])
    family("nodecert_last_run_crashed", "gauge",
           "1 when the last run itself broke (its verdict is ERROR; see the history).",
           [({}, 1.0 if record.get("crashed") else 0.0)])
    family("nodecert_last_run_skipped", "gauge",
           "1 when the last run was skipped (GPUs busy with user work).",
           [({}, 1.0 if record.get("skipped") else 0.0)])
    # A skipped run judges nothing: the verdict stays the last judged run's, with its
    # time, so a FAIL alert never clears without a run that passed.
    judged = record.get("last_judged") if record.get("skipped") else record
    if isinstance(judged, dict) and judged.get("verdict") in VERDICTS:
        family("nodecert_node_verdict", "gauge",
               "Worst verdict of the last judged run: 0 PASS, 1 WARN, 2 FAIL, 3 ERROR.",
               [({"suite": str(judged.get("suite"))}, VERDICTS.index(judged["verdict"]))])
        family("nodecert_node_verdict_timestamp_seconds", "gauge",
               "When the run nodecert_node_verdict comes from ended (Unix time).",
               [({}, float(judged.get("finished") or 0))])
    family("nodecert_check_verdict", "gauge",
           "Verdict per check of the last run: 0 PASS, 1 WARN, 2 FAIL, 3 ERROR.",
           [({"check": r["check"]}, VERDICTS.index(r["verdict"])) for r in results
            if r.get("fault_code") != NOT_JUDGED])  # judged when the control side collects
    figs = all_figures(results)  # the same headline figures drift and the report use

    def per(prefix: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(f.labels), f.value) for n, f in sorted(figs.items())
                if n.startswith(prefix + "{")]
    family("nodecert_gemm_tflops", "gauge", "Sustained GEMM TFLOPS per GPU (load.burnin).",
           per("gemm_tflops"))
    bw = figs.get("allreduce_busbw")
    family("nodecert_allreduce_busbw_bytes_per_second", "gauge",
           "NCCL all-reduce bus bandwidth at the largest size.",
           [({}, bw.value * 1e9)] if bw else [])
    family("nodecert_soak_peak_temperature_celsius", "gauge", "Peak GPU temperature in the soak.",
           per("soak_peak_temp"))
    eff = figs.get("scaling_efficiency")
    family("nodecert_scaling_efficiency_ratio", "gauge",
           "Training throughput on all GPUs / (GPUs x one GPU alone) (load.scaling).",
           [({}, eff.value)] if eff else [])
    family("nodecert_storage_seq_read_bytes_per_second", "gauge", "fio sequential read.",
           [(dict(f.labels), f.value * 1e6) for n, f in sorted(figs.items())
            if n.startswith("storage ") and n.endswith(" seq_read_mbps")])
    return "\n".join(lines) + "\n"


class MetricsDirError(OSError):
    """The textfile directory is not one nodecert may write into as root."""


def write_metrics(record: dict[str, Any], directory: str = "") -> str | None:
    """nodecert.prom in node_exporter's textfile directory (None when there is none).
    MetricsDirError for a directory this user does not own, or that group or others can
    write: whoever can write it could swap nodecert's files for links."""
    directory = directory or TEXTFILE
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        raise MetricsDirError(f"{directory} is not a directory (a link?): metrics not written")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise MetricsDirError(
            f"{directory} is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}: "
            f"metrics are written only into a directory owned by uid {os.geteuid()} that "
            "group and others cannot write (chown root:root; chmod 0755)")
    path = os.path.join(directory, "nodecert.prom")
    # node_exporter never reads a half-written file.
    write_atomic(path, metrics_text(record).encode())
    return path


# --- history -----------------------------------------------------------------------------

def keep_history(record: dict[str, Any], keep: int) -> str:
    hist = os.path.join(STATE, "history")
    os.makedirs(hist, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(record["finished"]))
    path = os.path.join(hist, f"{stamp}-{record['reason']}-{os.getpid()}.json")
    write_atomic(path, json.dumps(record).encode())
    runs = sorted(f for f in os.listdir(hist) if f.endswith(".json"))
    for old in runs[:-keep] if keep > 0 else []:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(hist, old))
    return path


# --- Slurm ---------------------------------------------------------------------------------

def slurm_node_state(node: str, timeout: float = 30) -> tuple[str, str]:
    out = tools.run(["scontrol", "show", "node", node], timeout=timeout)
    state = reason = ""
    for tok in out.text.replace("\n", " ").split(" "):
        if tok.startswith("State="):
            state = tok[len("State="):]
    if "Reason=" in out.text:
        reason = out.text.split("Reason=", 1)[1].split("\n")[0].strip()
        reason = reason.rsplit(" [", 1)[0].strip()  # "... [root@2026-11-29T10:00:00]"
    return state, reason


# Base states in which a node takes jobs; anything else (DOWN, FAIL, MAINT, RESERVED,
# FUTURE, POWERED_DOWN, REBOOT, ...) is someone else's business and never touched.
_SCHEDULABLE = {"IDLE", "ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING", "COMP"}
_DRAIN_FLAGS = {"DRAIN", "DRAINING", "DRAINED", "DRNG", "DRAIN*"}


def _state_parts(state: str) -> tuple[str, set[str]]:
    """'IDLE+DRAIN' -> ('IDLE', {'DRAIN'}); a trailing '*' (not responding) is a flag."""
    parts = [p for p in state.upper().replace("*", "+NOT_RESPONDING").split("+") if p]
    return (parts[0] if parts else ""), set(parts[1:])


def slurm_action(verdict: str, state: str, reason: str, resume: bool,
                 kept: str | None = None) -> str | None:
    """'drain' / 'resume' / None. Pure: the policy, tested on its own.

    Drain only a node in a plain schedulable state with no reason set; resume only a
    node nodecert itself drained -- `kept`, the reason nodecert recorded when it drained
    the node, is the one Slurm shows (a reason that merely starts "nodecert:" is anyone's
    to write) -- with no other flag. DOWN, FAIL, MAINT, a node not responding and anyone
    else's drain are never touched."""
    base, flags = _state_parts(state)
    ours = kept is not None and reason.startswith(DRAIN_PREFIX) and reason == kept
    drained = bool(flags & _DRAIN_FLAGS) or base in _DRAIN_FLAGS
    other_flags = flags - _DRAIN_FLAGS
    if verdict in ("FAIL", "ERROR"):
        if base in _SCHEDULABLE and not flags and not reason.strip():
            return "drain"
        return None
    if resume and drained and ours and base in _SCHEDULABLE and not other_flags:
        return "resume"
    return None


DRAINS = state.DRAINS
_kept_drains = state.kept_drains


def _keep_drain(node: str, reason: str | None) -> None:
    kept = _kept_drains()
    if reason is None:
        kept.pop(node, None)
    else:
        kept[node] = reason
    write_atomic(os.path.join(STATE, DRAINS), json.dumps(kept, sort_keys=True).encode())


def slurm(record: dict[str, Any], node: str, resume: bool) -> str:
    if tools.which("scontrol") is None:
        return "scontrol not found: Slurm left alone"
    state, reason = slurm_node_state(node)
    kept = _kept_drains().get(node)
    action = slurm_action(record["verdict"], state, reason, resume, kept)
    if action == "drain":
        bad = next((r for r in record["results"] if r["verdict"] in ("FAIL", "ERROR")), None)
        why = (f"{DRAIN_PREFIX} {bad['check']} {bad['verdict']}" if bad else
               f"{DRAIN_PREFIX} validation {record['verdict']}")[:120]
        # Recorded first: a drain nodecert made is one it can later recognise as its own.
        _keep_drain(node, why)
        tools.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN",
                   f"Reason={why}"], timeout=30)
        return f"drained {node}: {why}"
    if action == "resume":
        tools.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=30)
        _keep_drain(node, None)
        return f"resumed {node} (its nodecert drain; the run passed)"
    if "DRAIN" in state.upper() and not (kept is not None and reason == kept):
        return f"{node} is drained by someone else ({reason!r}): not touched"
    return f"{node} left {state or 'as is'}"


# --- the run -------------------------------------------------------------------------------

def local_run(args: argparse.Namespace) -> int:
    os.makedirs(STATE, exist_ok=True)
    with open(os.path.join(STATE, "local.lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("nodecert: another scheduled validation is running; not starting a second")
            return 0
        started = time.time()
        reason = args.reason
        if reason == "timer" and os.path.exists(os.path.join(STATE, PENDING)):
            reason = "after-update"  # the dpkg hook queued this run
        record: dict[str, Any] = {"schema": "nodecert.local-run/v1", "suite": args.suite,
                                  "reason": reason, "host": socket.gethostname(),
                                  "started": started, "results": []}
        if os.environ.get("NODECERT_JOB"):  # started as a job of the site's scheduler
            record["job"] = os.environ["NODECERT_JOB"][:128]
        try:
            _run_into(record, args)
        except Exception as exc:  # the run broke: say so wherever the verdict is read
            record.update(verdict="ERROR", crashed=True,
                          error=f"the scheduled run crashed: {type(exc).__name__}: {exc}")
        record["finished"] = time.time()
        if record.get("skipped"):
            last = state.last_judged(VERDICTS)
            if last is not None:
                record["last_judged"] = last
        try:
            prom = write_metrics(record, args.textfile_dir)
        except OSError as exc:
            prom, record["metrics_error"] = None, str(exc)
        # History and metrics first: whatever Slurm does, the verdict is kept.
        path = keep_history(record, args.keep)
        if args.slurm_drain and not record.get("skipped"):
            try:
                record["slurm"] = slurm(record, args.slurm_node
                                        or socket.gethostname().split(".")[0], args.slurm_resume)
            except Exception as exc:  # any failure here is the run's crash
                record.update(slurm=f"failed: {type(exc).__name__}: {exc}", slurm_failed=True)
            write_atomic(path, json.dumps(record).encode())  # what Slurm did, in the history
        if not record.get("skipped") and not record.get("crashed"):
            with contextlib.suppress(OSError):  # a crashed run leaves the queued run queued
                os.unlink(os.path.join(STATE, PENDING))
        print(f"nodecert: {record.get('skipped') or record['verdict']}"
              + (f" ({record['error']})" if record.get("error") else "")
              + (f"; {record['idle_unknown']}" if record.get("idle_unknown") else "")
              + f"; history {path}"
              + (f"; metrics {prom}" if prom else "")
              + (f"; metrics not written: {record['metrics_error']}"
                 if record.get("metrics_error") else "")
              + (f"; slurm: {record['slurm']}" if record.get("slurm") else ""))
        if record.get("crashed") or record.get("slurm_failed"):
            return EXIT_CRASH
        if record.get("skipped"):
            return 0  # it gave way, as it must: no finding, no broken unit
        return 0 if record["verdict"] in ("PASS", "WARN") else EXIT_FINDING


def _run_into(record: dict[str, Any], args: argparse.Namespace) -> None:
    busy: list[str] = []
    if not args.force:
        try:
            busy = gpu_users()
        except GpuUsersUnknown as exc:
            # Not a job: the run goes on, and says it could not tell (the checks that
            # read the GPUs judge whatever made the tool fail).
            record["idle_unknown"] = f"could not tell whether the GPUs are busy: {exc}"
    plan_path = state.plan_path(args.suite)
    if busy:
        # A skipped run judged nothing: no verdict (never a PASS).
        record.update(skipped=f"GPUs busy with user work: {'; '.join(busy[:5])}",
                      verdict=None)
        return
    if not os.path.exists(plan_path):
        record.update(verdict="ERROR", error=f"no plan for suite {args.suite!r}: run "
                      "`nodecert validate --suite` from the control side once first")
        return
    with open(plan_path) as f:
        plan = Plan.from_dict(json.load(f))
    buf = io.StringIO()
    if args.idle:
        with IdleGuard(args.idle_poll_s) as guard:
            run_suite(plan, buf, None, guard.stop, guard.current)
        if guard.why:
            # A run cut short is no verdict: skipped, as a run on busy GPUs is.
            record.update(skipped=guard.why, yielded=True, verdict=None, results=[])
            return
    else:
        run_suite(plan, buf, None)
    events = [json.loads(x) for x in buf.getvalue().splitlines() if x.strip()]
    record["results"] = [e["result"] for e in events if e["event"] == "result"]
    judged = [r for r in record["results"] if r.get("fault_code") != NOT_JUDGED]
    worst = max((VERDICTS.index(r["verdict"]) for r in judged), default=3)
    record["verdict"] = VERDICTS[worst]
    record["simulated"] = any(r.get("simulated") for r in record["results"])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nodecert_node local-run",
                                 description="scheduled validation on this node")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--reason", default="timer")
    ap.add_argument("--force", action="store_true", help="run even while GPUs are busy")
    ap.add_argument("--idle", action="store_true",
                    help="give way within seconds to a GPU job that starts or to SIGTERM")
    ap.add_argument("--idle-poll-s", type=float, default=2.0,
                    help="with --idle: how often to look for GPU jobs")
    ap.add_argument("--keep", type=int, default=30, help="history entries kept")
    ap.add_argument("--textfile-dir", default="", help="node_exporter textfile directory")
    ap.add_argument("--slurm-drain", action="store_true")
    ap.add_argument("--slurm-resume", action="store_true")
    ap.add_argument("--slurm-node", default="")
    return local_run(ap.parse_args(argv))
