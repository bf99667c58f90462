"""Ansible at fleet scale: the strategy and rolling batches reach ansible-playbook as
settings; bad values are refused before anything runs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodecert.cli import provision
from nodecert.core.errors import InventoryError
from nodecert.core.verdict import Verdict
from nodecert.provision.run import FleetSettings, gates_passed
from nodecert.stack.gate import GateReport, RuleResult
from support.env import REPO


def test_defaults_change_nothing() -> None:
    f = FleetSettings()
    assert f.extravars() == {}
    assert f.envvars() == {"ANSIBLE_STRATEGY": "linear"}


def test_settings_become_ansible_settings(tmp_path: Path) -> None:
    f = FleetSettings("free", "10%", 5)
    assert f.extravars() == {"nodecert_serial": "10%", "nodecert_max_fail_percentage": 5}
    assert f.envvars() == {"ANSIBLE_STRATEGY": "free"}


def test_the_plays_gather_no_facts() -> None:
    # The roles take the OS from the host's os-release in their one read: no play may
    # gather Ansible facts (a module run per host, and facts a cache could keep stale).
    for play in (REPO / "playbooks").glob("*.yml"):
        for entry in yaml.safe_load(play.read_text()):
            if "hosts" in entry:
                assert entry.get("gather_facts") is False, (play.name, entry.get("name"))


@pytest.mark.parametrize(("kwargs", "msg"), [
    ({"strategy": "host_pinned"}, "is not one of linear, free"),
    ({"serial": "0"}, "neither a host count"),
    ({"serial": "ten"}, "neither a host count"),
    ({"serial": "5%%"}, "neither a host count"),
    ({"max_fail_percentage": 101}, "within 0..100"),
])
def test_bad_values_are_refused(kwargs: dict[str, object], msg: str) -> None:
    with pytest.raises(InventoryError, match=msg):
        FleetSettings(**kwargs)  # type: ignore[arg-type]


def test_mitogen_is_offered_only_where_it_is_installed(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    from nodecert.provision import run as provisioning

    monkeypatch.setattr(provisioning, "mitogen_strategies", lambda: None)
    with pytest.raises(InventoryError, match="needs Mitogen"):
        FleetSettings("mitogen_linear")
    monkeypatch.setattr(provisioning, "mitogen_strategies", lambda: str(tmp_path))
    env = FleetSettings("mitogen_linear").envvars()
    assert env == {"ANSIBLE_STRATEGY": "mitogen_linear",
                   "ANSIBLE_STRATEGY_PLUGINS": str(tmp_path)}


def test_the_site_play_takes_the_batches_from_extra_vars() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    site = next(p for p in plays if p.get("roles"))
    assert site["serial"] == "{{ nodecert_serial | default('100%') }}"
    assert site["max_fail_percentage"] == "{{ nodecert_max_fail_percentage | default(100) }}"


def test_the_cli_refuses_a_bad_serial_before_touching_anything(tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("[x]\nh1 ansible_host=127.0.0.1\n")
    r = CliRunner().invoke(provision, ["-i", str(inv), "--serial", "lots",
                                            "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2, r.output
    assert "neither a host count nor a percentage" in r.output
    assert not (tmp_path / "runs").exists()


def test_the_cli_refuses_mitogen_where_it_is_not_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.provision import run as provisioning

    monkeypatch.setattr(provisioning, "mitogen_strategies", lambda: None)
    inv = tmp_path / "inv.ini"
    inv.write_text("[x]\nh1 ansible_host=127.0.0.1\n")
    r = CliRunner().invoke(provision, ["-i", str(inv), "--strategy", "mitogen_linear",
                                       "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2, r.output
    assert "needs Mitogen for Ansible" in r.output and "pip install 'nodecert[fleet]'" in r.output
    assert not (tmp_path / "runs").exists()


def test_the_old_fact_cache_option_still_parses_and_says_it_does_nothing(
        tmp_path: Path) -> None:
    # Command lines written for earlier releases keep working: the note goes to stderr,
    # the run goes on (here: to the bad serial, refused as ever).
    inv = tmp_path / "inv.ini"
    inv.write_text("[x]\nh1 ansible_host=127.0.0.1\n")
    r = CliRunner().invoke(provision, ["-i", str(inv), "--fact-cache", str(tmp_path / "f"),
                                       "--serial", "lots", "--runs-dir", str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    assert "--fact-cache has no effect" in r.output
    assert "neither a host count nor a percentage" in r.output
    assert "--fact-cache" not in CliRunner().invoke(provision, ["--help"]).output


def _gate(verdict: Verdict, gpu: str | None = "H200-SXM", os_name: str | None = "debian-12",
          stack: str = "r580-cuda13.0") -> GateReport:
    return GateReport(stack, gpu, os_name, dt.date(2026, 12, 1),
                      (RuleResult("driver-supports-gpu", verdict, "m", ()),))


def test_only_complete_passed_gates_spare_the_play_its_own() -> None:
    gates = ((("h1",), _gate(Verdict.PASS)), (("h2",), _gate(Verdict.WARN, gpu="L40S")),
             (("h3",), _gate(Verdict.FAIL, gpu="B200")),
             # judged without a GPU model or an OS: the play must still gate these hosts
             (("h4",), _gate(Verdict.PASS, gpu=None)), (("h5",), _gate(Verdict.PASS, os_name=None)))
    assert gates_passed(gates) == ["r580-cuda13.0|H200-SXM|debian-12",
                                   "r580-cuda13.0|L40S|debian-12"]
    # The play's test is built from the same three parts in the same order.
    gate_yml = (REPO / "roles/preflight/tasks/gate.yml").read_text()
    assert ("(nodecert_common_stack ~ '|' ~ preflight_found_model ~ '|' ~ nodecert_common_os)"
            in gate_yml)
