"""After a repair: a loaded re-test before the node goes back into service.

A reboot or a GPU reset clears the signal (the Xid, the pending remap) without proving
the part, so `revalidate --after-repair` re-runs, on each node, the checks still open
plus a loaded re-test (the burn-in with its result comparison, NCCL inside the node,
the GPU's health), and gates on them. A check is open from the run it FAILed or
ERRORed in, in any run since the node's newest acceptance certificate, until a run
re-tests it and it passes: a later partial run cannot make a failure forgotten.
`repair.retest` PASSes only when every one of those checks has a result in the new run
that is PASS or WARN. An open check with no result now (not re-tested) fails the gate,
as one that still fails does. Only then is the node resumed in Slurm (a node nodecert
drained) and its certificate a health record (HEALTHY: a re-test is not an acceptance
run; READY again after one); otherwise it is (kept) drained with the reason.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodecert.certs.signing import b64decode_any
from nodecert.fleet.repair import action
from nodecert.runs.records import HostRecord, host_history
from nodecert_node.contract import Result, Verdict, write_atomic

CHECK = "repair.retest"
# The loaded re-test every repaired node gets (those its suite runs).
LOADED = ("hardware.inventory", "health.gpu", "health.xid", "load.burnin",
          "fabric.nccl_allreduce")
REASON_PREFIX = "nodecert:"


def _acceptance_certified(rec: HostRecord) -> bool:
    """Whether the host's certificate of this run is an acceptance certificate (READY).
    What cannot be read is not one: the failures before it stay open (the safe side)."""
    try:
        env = json.loads(rec.run.certificate(rec.host).read_text())
        p = json.loads(b64decode_any(str(env["payload"])))["predicate"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(p, dict) and p.get("verdict") == "READY" and bool(
        (p.get("acceptance") or {}).get("accepted"))


def failing_before(runs_dir: Path, host: str) -> tuple[str | None, list[str]]:
    """(the runs they failed in, the checks still open): every check that FAILed or
    ERRORed in a run of the host since its newest acceptance certificate and has not
    PASSed (or WARNed) in a later run. A later partial run that did not re-test a
    failure leaves it open: only a re-test closes it. (None, []) when there is none."""
    recs = sorted(host_history(runs_dir, host), key=lambda r: r.started or r.finished)
    since = max((i for i, r in enumerate(recs) if _acceptance_certified(r)), default=-1)
    open_in: dict[str, str] = {}  # check: the run it (last) failed in
    for rec in recs[since + 1:]:
        for r in rec.results:
            if r.check == CHECK:  # a gate that failed before is not a check to re-run
                continue
            if r.verdict >= Verdict.FAIL:
                open_in[r.check] = rec.run_id or "?"
            else:
                open_in.pop(r.check, None)
    if not open_in:
        return (recs[-1].run_id if recs else None), []
    return ", ".join(sorted(set(open_in.values()))), sorted(open_in)


def retest_checks(suite_checks: tuple[str, ...], failing: dict[str, list[str]]) -> tuple[
        str, ...]:
    """The checks to run: the loaded re-test and every check that failed on any host,
    those the suite has, in the suite's order."""
    wanted = set(LOADED) | {c for cs in failing.values() for c in cs}
    return tuple(c for c in suite_checks if c in wanted)


def gate(results: list[Result], failing: list[str], before_run: str | None,
         planned: tuple[str, ...]) -> Result:
    """repair.retest for one host from its new results (drift and fleet included)."""
    by = {r.check: r for r in results}
    need = sorted(set(failing) | (set(LOADED) & set(planned)))
    problems = []
    for c in need:
        r = by.get(c)
        if r is None:
            problems.append(f"{c} failed before and was not re-tested" if c in failing
                            else f"{c} did not run")
        elif r.verdict >= Verdict.FAIL:
            problems.append(f"{c} {r.verdict}: {r.summary}")
    loaded = [c for c in ("load.burnin", "fabric.nccl_allreduce") if c in planned]
    value = {"failing_before": failing, "before_run": before_run, "retested": need,
             "loaded": loaded}
    if not loaded:
        problems.append("no loaded check in the suite: run the re-test with --suite standard")
    if problems:
        codes = sorted({by[c].fault_code for c in need if c in by and by[c].fault_code})
        chain = action(codes[0]).chain if codes else action("").chain
        return Result(CHECK, Verdict.FAIL, f"repair not proven: {problems[0]}" + (
            f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""), value=value,
            findings=tuple(problems), fault_code="NC-REPAIR-RETEST",
            remediation="Keep the node out of service. Next step of the fault's action "
                        f"chain: {' -> '.join(chain)} (validators/fault-codes.yml); then "
                        "run `nodecert revalidate --after-repair` again.")
    return Result(CHECK, Verdict.PASS, f"loaded re-test passed: {', '.join(loaded)}"
                  + (f"; failed before ({before_run}) and now pass: {', '.join(failing)}"
                     if failing else ""), value=value)


# --- Slurm ---------------------------------------------------------------------------------

Remote = Callable[[str, float], tuple[int | None, str, bool]]  # (command, timeout) -> rc, out, late


@dataclass(frozen=True)
class NodeState:
    state: str  # "IDLE", "DRAIN", "IDLE+DRAIN", "DOWN+DRAIN", ...
    reason: str

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()


def node_state(remote: Remote, node: str) -> NodeState:
    """scontrol's State= and Reason= of one node (its one-line form)."""
    rc, out, late = remote(f"scontrol -o show node {shlex.quote(node)}", 30)
    if rc != 0 or late:
        raise RuntimeError(f"scontrol show node {node} failed (rc {rc}): {out.strip()[-300:]}")
    fields = {}
    rest = out.strip()
    # Reason= is last and may hold spaces; every other field is one word.
    if " Reason=" in rest:
        rest, reason = rest.split(" Reason=", 1)
        fields["Reason"] = reason.rsplit(" [", 1)[0].strip()
    for word in rest.split():
        k, _, v = word.partition("=")
        fields.setdefault(k, v)
    if "State" not in fields:
        raise RuntimeError(f"scontrol show node {node}: no State= in {out.strip()[:200]!r}")
    return NodeState(fields["State"], fields.get("Reason", ""))


DRAINS = "slurm-drains.json"  # under --runs-dir: node -> the reason the gate drained it with


def kept_drains(runs_dir: Path) -> dict[str, str]:
    """The drains the gate made (recorded before each drain, under the runs)."""
    try:
        data = json.loads((runs_dir / DRAINS).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def keep_drain(runs_dir: Path, node: str, reason: str | None) -> None:
    kept = kept_drains(runs_dir)
    if reason is None:
        kept.pop(node, None)
    else:
        kept[node] = reason
    runs_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(str(runs_dir / DRAINS), json.dumps(kept, sort_keys=True).encode() + b"\n",
                 mode=0o600)


def apply_gate(remote: Remote, node: str, passed: bool, why: str, *,
               ours: frozenset[str] = frozenset(),
               record: Callable[[str | None], None] | None = None) -> str:
    """Resume a node nodecert drained when the gate passed; drain (or keep drained) a node
    whose gate failed. A drain is nodecert's only when its reason is exactly one nodecert
    recorded (`ours`: the gate's own drains and the node's scheduled runs'); any other,
    one starting "nodecert:" included, is someone else's and never touched. `record`
    is told the reason before a drain is made (None after a resume). Returns what it did."""
    st = node_state(remote, node)
    mine = bool(st.reason) and st.reason in ours
    if passed:
        if not st.drained:
            return "not drained: nothing to resume"
        if not mine:
            return f"drained by someone else ({st.reason or 'no reason'}): left drained"
        cmd = f"scontrol update NodeName={shlex.quote(node)} State=RESUME"
        did, reason = "resumed", None
    else:
        if st.drained and not mine:
            return f"drained by someone else ({st.reason or 'no reason'}): left as it is"
        reason = f"{REASON_PREFIX} repair re-test failed: {why}"[:200]
        cmd = (f"scontrol update NodeName={shlex.quote(node)} State=DRAIN "
               f"Reason={shlex.quote(reason)}")
        did = "kept drained" if st.drained else "drained"
        if record is not None:
            record(reason)  # first: a drain made is one nodecert can later call its own
    rc, out, late = remote(cmd, 30)
    if rc != 0 or late:
        raise RuntimeError(f"{cmd} failed (rc {rc}): {out.strip()[-300:]}")
    if reason is None and record is not None:
        record(None)
    return did


__all__ = ["CHECK", "DRAINS", "LOADED", "NodeState", "apply_gate", "failing_before", "gate",
           "keep_drain", "kept_drains", "node_state", "retest_checks"]
