"""A broken or hostile node cannot sink the run: every event is validated, lines are
capped, NaN/Infinity/lone surrogates are refused, the other hosts finish, and no node
text reaches a terminal, HTML or XML with its control characters."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from nodecert.certs.junit import node_xml
from nodecert.core.textsafe import clean
from nodecert.inventory.reader import load_inventory
from nodecert.profiles import thresholds
from nodecert.runs.store import HostLink, HostRun
from nodecert.transport.events import MAX_LINE, BadEvent, LineReader, decode_event
from nodecert.transport.silence import NodeLimit
from nodecert.transport.ssh import Endpoint
from nodecert.validation import session as nodesession
from nodecert.validation.plan import build_plan
from nodecert.validation.session import MAX_ANSWER, NodeAnswerTooLarge, SshRunner, exec_command
from nodecert_node.contract import Result, Verdict
from support.env import REPO
from support.nodeclient import Exited

CHECKS = ["health.gpu", "health.xid"]


def result_line(check: str, verdict: str = "PASS", **extra: Any) -> bytes:
    d = Result(check, Verdict[verdict], "ok").as_dict()
    d.update(extra)
    return json.dumps({"event": "result", "result": d}).encode()


# --- one line -> one event ----------------------------------------------------------------

def test_valid_events_decode() -> None:
    assert decode_event(b'{"event": "hello", "python": "3.12"}', CHECKS)["event"] == "hello"
    ev = decode_event(result_line("health.gpu"), CHECKS)
    assert isinstance(ev["result"], Result) and ev["result"].verdict is Verdict.PASS


@pytest.mark.parametrize(("raw", "why"), [
    (b'{"event": "result", "result": {"value": NaN}}', "NaN is not a number"),
    (b'{"event": "hello", "x": Infinity}', "Infinity is not a number"),
    (b'{"event": "hello", "host": "\\ud800"}', "surrogate"),
    (b'\xff\xfe{"event": "hello"}', "not a JSON event"),
    (b'["event", "hello"]', "not a JSON object but list"),
    (b'{"event": "shell", "cmd": "rm -rf /"}', "unknown event kind 'shell'"),
    (b'{"event": "start", "check": "evil.check"}', "not planned: 'evil.check'"),
    (result_line("health.gpu", summary=None) .replace(b'"summary": null', b'"x": 1'),
     "not a valid result"),
    (result_line("health.gpu").replace(b'"PASS"', b'"READY"'), "not a valid result"),
    (result_line("hardware.inventory"), "not planned: 'hardware.inventory'"),
])
def test_bad_events_are_refused_naming_the_fault(raw: bytes, why: str) -> None:
    with pytest.raises(BadEvent, match=why) as exc:
        decode_event(raw, CHECKS)
    assert exc.value.text  # the offending text is kept as evidence


# --- the line reader ------------------------------------------------------------------------

class Chan:
    """A paramiko channel stand-in that hands out prepared chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.sent = b""

    def settimeout(self, t: float) -> None:
        pass

    def recv(self, n: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    def exec_command(self, cmd: str) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def close(self) -> None:
        pass


def test_reader_splits_lines_across_chunks() -> None:
    r = LineReader(Chan([b'{"a"', b': 1}\n{"b": 2}\n{"c"', b": 3}\n"]))  # type: ignore[arg-type]
    stop = threading.Event()
    got = [r.line((NodeLimit(1e9),), stop) for _ in range(4)]
    assert got == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}', None]


def test_reader_caps_a_line_and_scans_each_byte_once() -> None:
    chunk = b"x" * 65536
    n = MAX_LINE // len(chunk) + 2
    r = LineReader(Chan([chunk] * n))  # type: ignore[arg-type]
    with pytest.raises(BadEvent, match="longer than 16 MiB"):
        r.line((NodeLimit(1e9),), threading.Event())
    assert r.scanned == len(r.buf) <= MAX_LINE + len(chunk)


# --- a whole run: one hostile host, one good host ------------------------------------------

class Client:
    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    def get_transport(self) -> Any:
        outer = self

        class T:
            def open_session(self, timeout: float | None = None) -> Chan:
                return Chan([b"\n".join(outer.lines) + b"\n"])
        return T()

    def close(self) -> None:
        pass


def _runs(tmp_path: Path) -> dict[str, HostRun]:
    specs = load_inventory(REPO / "inventory" / "sample" / "lab.ini")
    out = {}
    for spec in list(specs.values())[:2]:
        plan = build_plan(spec, thresholds.suite("quick"), None, "rid", cli_thresholds={},
                          scratch=None, checks=tuple(CHECKS))
        out[spec.name] = HostRun(spec.name, spec, plan, None, tmp_path / spec.name)
    return out


def links(runs: dict[str, HostRun]) -> dict[str, HostLink]:
    return {n: HostLink(Endpoint.from_hostvars(n, {})) for n in runs}


@pytest.mark.parametrize("bad", [
    b'{"event": "result", "result": {"schema": "nodecert.result/v1", "check": "health.xid", '
    b'"verdict": "PASS", "summary": "ok", "value": NaN}}',
    b"\x1b[2K\r" + b"READY " * 10,
    b'{"event": "result", "result": 42}',
])
def test_hostile_host_errors_the_other_finishes(tmp_path: Path, bad: bytes,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(tmp_path)
    good, evil = list(runs)
    hello = b'{"event": "hello", "python": "3.12", "version": "x", "host": "n"}'
    scripts = {
        good: [hello, b'{"event": "start", "check": "health.gpu"}', result_line("health.gpu"),
               b'{"event": "start", "check": "health.xid"}', result_line("health.xid"),
               b'{"event": "done"}'],
        evil: [hello, b'{"event": "start", "check": "health.gpu"}', result_line("health.gpu"),
               b'{"event": "start", "check": "health.xid"}', bad, b'{"event": "done"}'],
    }
    monkeypatch.setattr(nodesession, "connect", lambda ep, **_: Client(scripts[ep.host]))
    monkeypatch.setattr(SshRunner, "_install_code", lambda self, c, hr: "/opt/x")
    said: list[str] = []
    ns = SshRunner(runs, links(runs), said.append, threading.Event(), (b"", "0" * 64))
    for hr in runs.values():
        ns.run_host(hr)
    assert runs[good].verdict is Verdict.PASS and runs[good].status == "done"
    h = runs[evil]
    assert h.verdict is Verdict.ERROR and "bad event during health.xid" in h.error
    err = next(r for r in h.results if r.check == "health.xid")
    assert err.verdict is Verdict.ERROR and "what the node sent" in err.evidence[0].output
    assert bad[:20].decode("utf-8", "replace") in err.evidence[0].output
    assert all("\x1b" not in line and "\r" not in line for line in said)
    assert (tmp_path / evil / "host.json").exists() or any((tmp_path / evil).iterdir())


# --- control characters never reach a terminal, HTML or XML --------------------------------

def test_clean_strips_escapes_and_controls() -> None:
    evil = "NOT READY\r\x1b[2K\x1b[1A\x1b[32mREADY\x1b[0m\x9b2J\x07\x00 ok\ttab\nnext"
    assert clean(evil) == "NOT READYREADY2J ok\ttab\nnext"


def test_junit_and_html_hold_no_control_characters(tmp_path: Path) -> None:
    summary = "NOT READY\r\x1b[32mREADY\x00\x1f"
    st = {"subject": [{"digest": {"sha256": "0" * 64}}],
          "predicate": {"host": "h\x1b[2Kx", "simulated": False, "verdict": "FAIL",
                        "run_id": "r", "suite": "quick", "validity": {"issued": 0},
                        "results": [{"check": "health.gpu", "verdict": "FAIL",
                                     "summary": summary, "findings": [summary],
                                     "remediation": "", "duration_s": 1}]}}
    xml = node_xml(st).decode()
    assert "\x1b" not in xml and "\x00" not in xml and "\r" not in xml
    assert "NOT READYREADY" in xml
    from nodecert.certs import html as report_html
    page = report_html._env().from_string("<p>{{ s }}</p>").render(s=summary)
    assert page == "<p>NOT READYREADY</p>"
    # The figures a node reports, as the page shows them, cleaned too
    shown = report_html.shown({"value": {"name": summary, summary: 1}})
    assert [(ln.label, ln.text) for ln in shown["lines"]] == [
        ("Name", "NOT READYREADY"), ("NOT READYREADY", "1")]
    assert "\x1b" not in shown["raw"] and "\x00" not in shown["raw"]


def test_validate_json_is_written_when_a_host_handler_crashes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.validation import run as validation
    from nodecert.validation.run import ValidateRequest

    def run_host(self: SshRunner, hr: HostRun) -> None:
        if hr.host == sorted(self.runs)[0]:
            raise RuntimeError("boom")
        hr.status = "done"
        hr.results = [Result(c, Verdict.PASS, "ok") for c in hr.checks]
        hr.save()

    monkeypatch.setattr(SshRunner, "run_host", run_host)
    run = validation.validate(ValidateRequest(REPO / "inventory" / "sample" / "lab.ini",
                              checks=tuple(CHECKS), runs_dir=tmp_path), progress=lambda line: None)
    summary = json.loads((run.run_dir / "validate.json").read_text())
    verdicts = {h: d["verdict"] for h, d in summary["hosts"].items()}
    first, *others = sorted(verdicts)
    assert verdicts[first] == "ERROR" and all(verdicts[o] == "PASS" for o in others)
    assert "RuntimeError('boom')" in run.hosts[first].error


# --- what a node echoes of its plan is held against the plan --------------------------------

def burnin_line(**value: Any) -> bytes:
    v = {"tflops_per_gpu": {"0": 663.2}, "dtype": "bf16", "n": 8192, "seconds": 120.4,
         "load": "torch", **value}
    d = Result("load.burnin", Verdict.PASS, f"1 GPUs, {v['dtype']} GEMM 8192^3 for 120 s: "
               "663-663 TFLOPS sustained, results bit-exact vs the reference",
               value=v).as_dict()
    return json.dumps({"event": "result", "result": d}).encode()


@pytest.mark.parametrize(("echo", "why"), [
    ({"dtype": "fp8\x1b[31m"},
     "the node reported dtype 'fp8\\x1b[31m', the plan asked 'bf16' (load.dtype)"),
    ({"n": 1024}, "the node reported n 1024, the plan asked 8192 (load.gemm_size)"),
    ({"seconds": 12.0}, "the node reported seconds 12.0, the plan asked 120 (load.burnin_s)"),
    ({"seconds": "120"},
     "the node reported seconds '120', the plan asked 120 (load.burnin_s)"),
])
def test_a_result_echoing_another_test_than_planned_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, echo: dict[str, Any],
        why: str) -> None:
    """A node that reports a dtype, size or duration other than the plan's ran another
    test: the result FAILs (its figures are not evidence of the planned one), whatever
    verdict the node gave it, and the node's text reaches no summary unescaped."""
    spec = next(iter(load_inventory(REPO / "inventory" / "sample" / "lab.ini").values()))
    plan = build_plan(spec, thresholds.suite("standard"), None, "rid", cli_thresholds={},
                      scratch=None, checks=("load.burnin",))
    runs = {spec.name: HostRun(spec.name, spec, plan, None, tmp_path / spec.name)}
    hello = b'{"event": "hello", "python": "3.12", "version": "x", "host": "n"}'
    start = b'{"event": "start", "check": "load.burnin"}'
    for lines, verdict in (([hello, start, burnin_line(), b'{"event": "done"}'], Verdict.PASS),
                           ([hello, start, burnin_line(**echo), b'{"event": "done"}'],
                            Verdict.FAIL)):
        runs[spec.name] = HostRun(spec.name, spec, plan, None, tmp_path / spec.name)
        monkeypatch.setattr(nodesession, "connect", lambda ep, lines=lines, **_: Client(lines))
        monkeypatch.setattr(SshRunner, "_install_code", lambda self, c, hr: "/opt/x")
        said: list[str] = []
        SshRunner(runs, links(runs), said.append, threading.Event(),
                     (b"", "0" * 64)).run_host(runs[spec.name])
        (res,) = runs[spec.name].results
        assert res.verdict is verdict, res.summary
    assert res.summary == f"not the planned test: {why}"
    assert res.fault_code == "NC-PLAN-MISMATCH" and "\x1b" not in " ".join(res.findings)
    assert all("\x1b" not in line for line in said)


# --- a node's answer to the controller's own commands is bounded ---------------------------

class Flood(Exited):
    """A channel whose node answers with `size` bytes, in 64 kB chunks."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.read = 0

    def recv(self, n: int) -> bytes:
        n = min(n, self.left)
        self.left -= n
        self.read += n
        return b"x" * n

    def close(self) -> None:
        pass


class FloodClient:
    def __init__(self, chan: Flood) -> None:
        self.chan = chan

    def get_transport(self) -> Any:
        chan = self.chan

        class T:
            def open_session(self, timeout: float | None = None) -> Flood:
                return chan
        return T()

    def close(self) -> None:
        pass


def test_a_node_answering_32_mib_to_a_64_kb_read_is_refused_at_1_mib() -> None:
    flood = Flood(32 * 2**20)
    ep = Endpoint.from_hostvars("n1", {})
    with pytest.raises(NodeAnswerTooLarge, match="more than 1 MiB to 'head'"):
        exec_command(FloodClient(flood), ep,  # type: ignore[arg-type]
                     "head -c 65536 /etc/nodecert/provisioned.json", None, 15, root=False)
    assert flood.read <= MAX_ANSWER + 65536  # stopped reading there
    assert exec_command(FloodClient(Flood(1000)), ep,  # type: ignore[arg-type]
                        "true", None, 15) == (0, "x" * 1000)


def test_a_flooding_node_is_lost_with_its_reason_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(tmp_path)
    hr = next(iter(runs.values()))
    monkeypatch.setattr(nodesession, "connect", lambda ep, **_: FloodClient(Flood(32 * 2**20)))
    monkeypatch.setattr(SshRunner, "_install_code", lambda self, c, hr: "/opt/x")
    ns = SshRunner({hr.host: hr}, links(runs), [].append, threading.Event(), (b"", "0" * 64))
    ns.run_host(hr)
    assert hr.status == "lost" and "more than 1 MiB" in hr.error
    assert hr.verdict is Verdict.ERROR and all(r.verdict is Verdict.ERROR for r in hr.results)
