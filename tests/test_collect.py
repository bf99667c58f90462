"""Collecting the nodes' own scheduled runs (`nodecert revalidate --collect`): the record
is untrusted input, judged on the control side, and a run that did not complete never
certifies."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from nodecert.inventory.reader import load_inventory
from nodecert.profiles import thresholds
from nodecert.revalidate.collect import collect_host, fetch_command, read_record
from nodecert.runs.store import HostRun
from nodecert.transport.events import BadEvent
from nodecert.transport.ssh import Endpoint
from nodecert.validation import session as session_mod
from nodecert.validation.plan import build_plan
from nodecert_node.contract import Result, Verdict
from support.env import REPO
from support.nodeclient import CHECKS, Client, ep, host, raw, record, runner


def test_fetch_command_picks_the_newest_of_a_reason() -> None:
    assert "*-after-update-*.json" in fetch_command("after-update")
    assert "history/*.json" in fetch_command("any") and "tail -n 1" in fetch_command("any")


def test_read_record_good() -> None:
    path, rec = read_record(raw(record()), CHECKS)
    assert path.endswith("x.json") and [r.verdict for r in rec["results"]] == [Verdict.PASS] * 2


@pytest.mark.parametrize(("body", "why"), [
    ("", "no scheduled run"),
    ('{"schema": "other"}', "not a nodecert.local-run/v1 record"),
    ('{"schema": "nodecert.local-run/v1", "started": NaN}', "NaN is not a number"),
    (json.dumps(record(results=[{"check": "evil"}])), "not a valid result"),
    (json.dumps(record(finished=None)), "no finished time"),
])
def test_read_record_refuses_what_it_cannot_trust(body: str, why: str) -> None:
    data = b"" if body == "" else raw(body)
    with pytest.raises(BadEvent, match=why):
        read_record(data, CHECKS)








def test_collected_run_keeps_the_node_times_and_verdicts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_mod, "connect", lambda ep: Client(raw(record())))
    hr = host(tmp_path)
    collect_host(hr, runner(hr), "after-update")
    assert hr.status == "done" and hr.verdict is Verdict.PASS
    assert (hr.started, hr.finished) == (1795995981.0, 1795996100.0)
    assert hr.node["reason"] == "after-update" and hr.simulated


@pytest.mark.parametrize("over", [{"crashed": True, "verdict": "ERROR", "error": "boom"},
                                  {"skipped": "GPUs busy", "results": []},
                                  {"results": [Result("health.gpu", Verdict.PASS,
                                                      "ok").as_dict()]}])
def test_incomplete_node_runs_are_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        over: dict[str, Any]) -> None:
    monkeypatch.setattr(session_mod, "connect", lambda ep: Client(raw(record(**over))))
    hr = host(tmp_path)
    collect_host(hr, runner(hr), "any")
    assert hr.verdict is Verdict.ERROR
    assert {r.check for r in hr.results} == set(CHECKS)  # every planned check accounted


class NodeClient(Client):
    """An SSH client answering each command by what it asks: the history fetch with the
    record, the provisioning record with the stack provisioning wrote."""

    def __init__(self, history: bytes, provisioned: bytes) -> None:
        super().__init__(b"")
        self.answers = {"/var/lib/nodecert/history": history,
                        "/etc/nodecert/provisioned.json": provisioned}

    def exec_command(self, cmd: str) -> None:
        super().exec_command(cmd)
        self.data = io.BytesIO(next(v for k, v in self.answers.items() if k in cmd))

    def sendall(self, data: bytes) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def recv_exit_status(self) -> int:
        return 0


def test_a_host_given_no_stack_is_judged_against_the_one_its_provisioning_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`revalidate --collect` without --stack resolves the stack as validate does: the
    node's provisioning record. A held driver that changed under the schedule is then
    drift (FAIL), not a conformance result nobody judged."""
    recorded = (REPO / "tests/fixtures/recorded/conformance-lab-h1-r580-debian12.txt"
                ).read_text().replace("##smi\n580.173.02", "##smi\n570.211.01")
    gathered = Result("stack.conformance", Verdict.PASS, "gathered on the node",
                      facts={"conformance_output": recorded}).as_dict()
    rec = record(results=[*record()["results"], gathered])
    spec = next(iter(load_inventory(REPO / "inventory" / "sample" / "lab.ini").values()))
    plan = build_plan(spec, thresholds.suite("quick"), None, "rid", cli_thresholds={},
                      scratch=None, checks=(*CHECKS, "stack.conformance"))
    hr = HostRun(spec.name, spec, plan, None, tmp_path / "h1")
    (tmp_path / "h1").mkdir()
    client = NodeClient(raw(rec), b'{"stack": "r580-cuda13.0"}')
    monkeypatch.setattr(session_mod, "connect", lambda ep: client)
    collect_host(hr, runner(hr), "any")
    assert hr.stack is not None and hr.stack.name == "r580-cuda13.0"
    conf = next(r for r in hr.results if r.check == "stack.conformance")
    assert conf.verdict is Verdict.FAIL and conf.fault_code == "NC-STACK-DRIFT"
    assert "nvidia-smi reports driver '570.211.01'" in " ".join(conf.findings)
    assert hr.plan.conformance["stack"] == "r580-cuda13.0"
    # no provisioning record: nothing is invented, the result stays unjudged
    hr2 = HostRun(spec.name, spec, plan, None, tmp_path / "h1")
    monkeypatch.setattr(session_mod, "connect",
                        lambda ep: NodeClient(raw(rec), b"not json"))
    collect_host(hr2, runner(hr2), "any")
    assert hr2.stack is None


def test_unreachable_host_is_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(ep: Endpoint) -> Any:
        raise OSError(111, "Connection refused")
    monkeypatch.setattr(session_mod, "connect", refuse)
    hr = host(tmp_path)
    collect_host(hr, runner(hr), "any")
    assert hr.status == "unreachable" and hr.verdict is Verdict.ERROR


def test_a_non_root_user_reads_the_history_through_sudo(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses
    client = Client(raw(record()))
    monkeypatch.setattr(session_mod, "connect", lambda ep: client)
    hr = host(tmp_path)
    collect_host(hr, runner(hr, dataclasses.replace(ep(hr), user="ops", become=True)), "any")
    assert hr.status == "done"
    assert client.commands[0].startswith("sudo -n -- sh -c ")  # the history is root's
