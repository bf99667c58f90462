"""`provision`: gate, then Ansible through ansible-runner, then conformance, per host.

Every run is kept as an artifact directory `runs/<timestamp>-<id>/`:
  inputs/            the inventory, the stack manifest, the extra variables
  ansible/           ansible-runner's private data dir (events, stdout, status)
  provision.json     per-host outcome (counts, first error, conformance), written atomically
Later commands (validate, certify) read it. No secret is ever written there:
extra variables are non-secret by construction (stack name, mirror URLs).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.core.ansible_env import ansible_config, ansible_local_temp
from nodecert.core.errors import InventoryError
from nodecert.core.paths import product_dir, stacks_dir
from nodecert.core.verdict import Verdict
from nodecert.inventory.maps import parse_mapping
from nodecert.inventory.reader import hostvars
from nodecert.provision.locks import site_wheel_locks
from nodecert.provision.mirrorvars import mirror_vars, refuse_mirror_credentials
from nodecert.provision.preflight import PreflightReport, preflight
from nodecert.runs.layout import RunDir
from nodecert.runs.store import record_provision_inputs, write_json
from nodecert.stack.conformance import Conformance, check_host, imex_expected
from nodecert.stack.gate import GateReport
from nodecert.stack.manifest import DEFAULT_VENDOR, Stack, find_stack
from nodecert.transport.become import BecomeSource
from nodecert.transport.bundle import write_bundle

PLAYBOOK_TIMEOUT_S = 6 * 3600
Progress = Callable[[str], None]


@dataclass
class HostOutcome:
    host: str
    status: str = "not run"  # provisioned | failed | unreachable | not run
    ok: int = 0
    changed: int = 0
    failed: int = 0
    first_error: str | None = None
    conformance: Conformance | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status, "ok": self.ok,
                "changed": self.changed, "failed": self.failed,
                "first_error": self.first_error,
                "conformance": self.conformance.as_dict() if self.conformance else None}


@dataclass
class ProvisionReport:
    run_dir: Path | None
    stack: str
    check_mode: bool
    gates: list[tuple[tuple[str, ...], GateReport]]
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    gate_failed: bool = False

    @property
    def exit_code(self) -> int:
        if self.gate_failed:
            return 1
        return 0 if all(h.status == "provisioned" and (h.conformance is None or h.conformance.ok)
                        for h in self.hosts.values()) else 1

    def as_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir) if self.run_dir else None, "stack": self.stack,
                "check_mode": self.check_mode, "gate_failed": self.gate_failed,
                "gates": [{"hosts": list(h), **g.as_dict()} for h, g in self.gates],
                "hosts": {n: h.as_dict() for n, h in self.hosts.items()},
                "exit_code": self.exit_code}


def _first_error(res: dict[str, Any]) -> str:
    for key in ("msg", "stderr", "stdout"):
        val = res.get(key)
        if val:
            text = str(val).strip()
            return text.splitlines()[0][:400] if key != "msg" else text[:600]
    return "failed (no message)"


class _Tracker:
    """Turns ansible-runner events into per-host counts and progress lines."""

    def __init__(self, hosts: list[str], progress: Progress) -> None:
        self.hosts = {h: HostOutcome(h) for h in hosts}
        self.progress = progress

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        host = data.get("host")
        if host not in self.hosts:
            return True
        h = self.hosts[host]
        task = data.get("task", "")
        res = data.get("res", {}) if isinstance(data.get("res"), dict) else {}
        if kind == "runner_on_ok":
            h.ok += 1
            if res.get("changed"):
                h.changed += 1
                self._line(h, "changed", task)
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            h.failed += 1
            h.first_error = h.first_error or f"{task}: {_first_error(res)}"
            self._line(h, "FAILED", f"{task}: {_first_error(res)}")
        elif kind == "runner_on_unreachable":
            h.status = "unreachable"
            h.first_error = h.first_error or f"unreachable: {_first_error(res)}"
            self._line(h, "UNREACHABLE", _first_error(res))
        return True

    def _line(self, h: HostOutcome, what: str, text: str) -> None:
        self.progress(f"{h.host:<14} ok={h.ok:<3} changed={h.changed:<3} failed={h.failed}  "
                      f"{what}: {text}")


SSH_ARGS = "-o StrictHostKeyChecking=yes -C -o ControlMaster=auto -o ControlPersist=60s"


STRATEGIES = ("linear", "free", "mitogen_linear", "mitogen_free")


def mitogen_strategies() -> str | None:
    """The directory of Mitogen's strategy plugins, when Mitogen is installed."""
    import importlib.util

    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))) / "plugins" / "strategy")


@dataclass(frozen=True)
class FleetSettings:
    """How Ansible runs over many hosts (docs/fleet.md): the strategy (linear, or free:
    every host through the roles at its own pace), rolling batches (serial: a number or
    a percentage) that stop when more than max_fail_percentage of a batch failed. No fact
    cache: the plays gather no Ansible facts (the roles read the OS from os-release)."""
    strategy: str = "linear"
    serial: str | None = None
    max_fail_percentage: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InventoryError(f"strategy {self.strategy!r} is not one of "
                                 f"{', '.join(STRATEGIES)}",
                                 hint="--strategy linear (the default) or free")
        if self.strategy.startswith("mitogen") and mitogen_strategies() is None:
            raise InventoryError(f"strategy {self.strategy} needs Mitogen for Ansible",
                                 hint="pip install 'nodecert[fleet]' (Mitogen, into "
                                      "nodecert's environment)")
        if self.serial is not None and not re.fullmatch(r"[1-9][0-9]*%?", self.serial):
            raise InventoryError(f"serial {self.serial!r} is neither a host count nor a "
                                 "percentage", hint="--serial 50 or --serial 10%")
        if self.max_fail_percentage is not None and not 0 <= self.max_fail_percentage <= 100:
            raise InventoryError("max fail percentage must be within 0..100",
                                 hint="--max-fail-percentage 10")

    def extravars(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.serial is not None:
            out["nodecert_serial"] = self.serial
        if self.max_fail_percentage is not None:
            out["nodecert_max_fail_percentage"] = self.max_fail_percentage
        return out

    def envvars(self) -> dict[str, str]:
        env = {"ANSIBLE_STRATEGY": self.strategy}
        plugins = mitogen_strategies() if self.strategy.startswith("mitogen") else None
        if plugins:
            env["ANSIBLE_STRATEGY_PLUGINS"] = plugins
        return env


def _run_playbook(ansible_runner: Any, run_dir: Path, inventory: Path, *,
                  xvars: dict[str, Any], hosts: list[str], tags: tuple[str, ...], forks: int,
                  cmdline: list[str], pipelining: bool, tracker: Any, control_dir: str,
                  fleet: FleetSettings) -> Any:
    return ansible_runner.run(
        private_data_dir=str(RunDir(run_dir).ansible),
        playbook=str(product_dir("playbooks") / "site.yml"),
        inventory=str(inventory.resolve()),
        extravars=xvars,
        limit=",".join(hosts),
        tags=",".join(tags) if tags else None,
        forks=forks,
        cmdline=shlex.join(cmdline) if cmdline else None,
        envvars={"ANSIBLE_PIPELINING": str(pipelining), "ANSIBLE_HOST_KEY_CHECKING": "True",
                 # OpenSSH keeps the first value of an option: strict host key checking
                 # comes before anything an inventory adds
                 "ANSIBLE_SSH_ARGS": SSH_ARGS,
                 "ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir,
                 "ANSIBLE_CONFIG": str(ansible_config()),
                 "ANSIBLE_LOCAL_TEMP": ansible_local_temp(),
                 "ANSIBLE_ROLES_PATH": str(product_dir("roles")), "ANSIBLE_NOCOLOR": "1",
                 "ANSIBLE_RETRY_FILES_ENABLED": "False",
                 **fleet.envvars(),
                 "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        event_handler=tracker,
        quiet=True,
        timeout=PLAYBOOK_TIMEOUT_S,
    )


@dataclass(frozen=True)
class ProvisionRequest:
    """What `provision` is asked to do: every setting of one provisioning run.

    stack: for every host (else each host's nodecert_stack). check: Ansible's check mode,
    nothing changes. tags: only these roles' tasks. mirror: the air-gapped mirror's URL.
    extravars: more Ansible variables, after nodecert's own."""

    inventory: Path
    stack: str | None = None
    limit: tuple[str, ...] = ()
    check: bool = False
    tags: tuple[str, ...] = ()
    forks: int = 10
    mirror: str | None = None
    runs_dir: Path = Path("runs")
    extravars: Mapping[str, Any] | None = None
    pipelining: bool = True
    become: BecomeSource | None = None
    fleet: FleetSettings | None = None
    # Security advisories accepted for every host (each stays a WARN, on the record).
    allow_advisories: frozenset[str] = frozenset()


def _verify(inventory: Path, done: list[str], stacks: dict[str, Stack], tracker: _Tracker,
            say: Progress) -> None:
    """Every provisioned host's conformance to its stack (IMEX only on the compute trays
    of a rack that expects it)."""
    connection = hostvars(inventory, done)
    for name in done:
        say(f"{name:<14} verifying conformance ...")
        rack, _ = parse_mapping("rack", connection[name].get("nodecert_rack"))
        tracker.hosts[name].conformance = check_host(
            name, connection[name], stacks[name], imex=imex_expected({"rack": rack}))


def _extravars(request: ProvisionRequest, fleet: FleetSettings, pre: PreflightReport,
               manifests: dict[str, Stack], say: Progress) -> dict[str, Any]:
    """The play's extra variables: where the stacks are (Ansible reads the same manifests
    as this process: NODECERT_HOME decides), what the gate passed, the node bundle,
    the rolling settings and the mirror's."""
    xvars: dict[str, Any] = {"nodecert_common_stacks_dir": str(stacks_dir().resolve()),
                             **({"stack": request.stack} if request.stack else {}),
                             **fleet.extravars(),
                             # the vendor whose roles site.yml runs
                             "nodecert_gpu_vendor": one_vendor(manifests),
                             "nodecert_gates_passed": gates_passed(pre.gates),
                             "nodecert_gate_allow_advisories": sorted(request.allow_advisories),
                             # Built here once, not by a Python started from the play
                             # (where the validators role's default would keep it).
                             "nodecert_node_bundle": write_bundle(
                                 Path.home() / ".cache" / "nodecert" / "bundles"),
                             **(request.extravars or {})}
    if request.mirror:
        xvars.update(mirror_vars(request.mirror, manifests, warn=say,
                                 site_locks=site_wheel_locks(request.inventory,
                                                             sorted(pre.hosts))))
    return xvars


def one_vendor(manifests: dict[str, Stack]) -> str:
    """The GPU vendor of the stacks one provisioning run installs: one run, one vendor
    (site.yml runs that vendor's roles on every host)."""
    vendors = {m.vendor for m in manifests.values()}
    if len(vendors) > 1:
        raise InventoryError(
            "the hosts' stacks are of more than one GPU vendor ("
            + ", ".join(f"{n}: {m.vendor}" for n, m in sorted(manifests.items())) + ")",
            hint="provision each vendor's hosts in a run of their own (--limit)")
    return vendors.pop() if vendors else DEFAULT_VENDOR


def _settle(tracker: _Tracker, runner: Any, playbook_error: str | None) -> None:
    """Each host's outcome from the play's recap: unreachable, failed or provisioned; a
    host the recap does not name keeps the first error seen (or the playbook's)."""
    stats = runner.stats or {}
    for name, h in tracker.hosts.items():
        if h.status == "unreachable" or name in (stats.get("dark") or {}):
            h.status = "unreachable"
        elif name in (stats.get("failures") or {}) or h.failed:
            h.status = "failed"
        elif name in (stats.get("ok") or {}):
            h.status = "provisioned"
        else:
            h.first_error = h.first_error or playbook_error or f"playbook {runner.status}"


def provision(request: ProvisionRequest, *, progress: Progress | None = None) -> ProvisionReport:
    """Gate every host, run site.yml, verify conformance. Raises only on bad input."""
    (inventory, stack, limit, check, tags, forks, mirror, runs_dir, _given_vars, pipelining,
     become, fleet, allow) = (getattr(request, f.name) for f in dataclasses.fields(request))
    say: Progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    refuse_mirror_credentials(mirror)
    pre = preflight(inventory, stack, limit=limit, allow_advisories=allow)
    # --stack applies to every host; without it each host gets its nodecert_stack.
    host_stack = {name: stack or spec.stack or "" for name, spec in pre.hosts.items()}
    stack_label = ", ".join(sorted(set(host_stack.values())))
    report = ProvisionReport(None, stack_label, check, list(pre.gates))
    if pre.verdict >= Verdict.FAIL:
        report.gate_failed = True
        for name in pre.hosts:
            report.hosts[name] = HostOutcome(name, "not run",
                                             first_error="stack fails the compatibility gate")
        return report
    manifests: dict[str, Stack] = {n: find_stack(n) for n in set(host_stack.values())}
    one_vendor(manifests)  # bad input: refused before the run directory is made
    run = RunDir.new(runs_dir).make()
    record_provision_inputs(run, inventory, [m.path for m in manifests.values()])
    run_dir = run.path
    report.run_dir = run_dir
    fleet = fleet or FleetSettings()
    xvars = _extravars(request, fleet, pre, manifests, say)
    write_json(run.extravars_input, xvars, private=True)
    hosts = sorted(pre.hosts)
    tracker = _Tracker(hosts, say)
    say(f"provisioning {len(hosts)} host(s) with {stack_label}"
        f"{' (check mode: nothing changes)' if check else ''}; run {run_dir}")
    import ansible_runner  # lazily: heavy, and only provisioning needs it

    # The become and vault password files go to ansible-playbook by path: their content
    # never enters the run directory or a log.
    cmdline = (["--check"] if check else []) + (become or BecomeSource.from_env()).ansible_args()
    # This run's SSH connections are its own (a short private directory: socket paths
    # are limited): a master another run opened is never reused past this run's
    # known_hosts.
    control_dir = tempfile.mkdtemp(prefix="nodecert-cp-")
    try:
        runner = _run_playbook(ansible_runner, run_dir, inventory, xvars=xvars, hosts=hosts,
                               tags=tags, forks=forks, cmdline=cmdline,
                               pipelining=pipelining, tracker=tracker,
                               control_dir=control_dir, fleet=fleet)
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)
    _settle(tracker, runner, _playbook_error(run.ansible) if runner.rc != 0 else None)
    done = [n for n, h in tracker.hosts.items() if h.status == "provisioned"]
    if done and not check:
        _verify(inventory, done, {n: manifests[host_stack[n]] for n in done}, tracker, say)
    report.hosts = tracker.hosts
    write_json(run.provision_summary, report.as_dict(), private=True)
    return report


def gates_passed(gates: tuple[tuple[tuple[str, ...], GateReport], ...]) -> list[str]:
    """The (stack, GPU model, OS) combinations gated here, for the play not to gate again.

    Only complete ones: a gate run without a GPU model or an OS did not judge what the
    play finds on the host, so the play still gates such a host itself."""
    return sorted({f"{g.stack}|{g.gpu}|{g.os}" for _, g in gates
                   if g.verdict < Verdict.FAIL and g.gpu and g.os})


def _playbook_error(private_dir: Path) -> str | None:
    """The first [ERROR] of a run that failed before reaching hosts (e.g. bad YAML)."""
    for stdout in sorted(private_dir.glob("artifacts/*/stdout")):
        lines = stdout.read_text(errors="replace").splitlines()
        for k, line in enumerate(lines):
            if line.startswith(("[ERROR]", "ERROR!")):
                origin = next((ln for ln in lines[k + 1:k + 3] if ln.startswith("Origin")), "")
                return f"{line} {origin}".strip()
    return None


