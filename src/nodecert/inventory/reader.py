"""Ansible inventories with each host's ordered hardware spec.

Parsing is ansible-core's own (INI and YAML inventory plugins, group_vars and
host_vars through its VariableManager), so a file that works with
``ansible-playbook -i`` means the same thing here. On top of it we validate the
integrator's order spec per host: the ``nodecert_*`` variables of the table in
variables.py.

Long because the variables' coercion and the per-host safety checks (secrets in plain
text, host key checking turned off, unsafe names) belong together: one place says what
an inventory may hold.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nodecert.core.ansible_env import ansible_quiet, select_hosts
from nodecert.core.errors import InventoryError, ManifestError, UnknownNameError
from nodecert.core.yamldoc import UniqueKeyLoader
from nodecert.inventory.maps import EXAMPLES, MAPPING_KINDS, parse_mapping
from nodecert.inventory.rack import TrayInfo, rack_problems
from nodecert.inventory.variables import BY_NAME, ORDER, REQUIRED, VALIDATION, VARIABLES
from nodecert.stack.compat import Matrix, default_matrix
from nodecert.stack.manifest import SUPPORTED_OS, stack_paths
from nodecert.transport.become import is_vaulted

# How Ansible reads booleans written as text (INI [group:vars] values are strings).
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True)
class HostSpec:
    """One host of the inventory after its groups' variables are applied: where to reach
    it, what the order says it holds, and its validation settings."""

    name: str
    address: str
    port: int
    groups: tuple[str, ...]
    # what the order says the host holds (the hardware check compares with it)
    gpu_model: str
    gpu_count: int
    cpu_cores: int
    ram_gb: int
    nvme_count: int
    nvme_min_gb: int | None = None
    os: str | None = None
    stack: str | None = None
    simulated: bool = False
    # nodecert_* validation settings (variables.VALIDATION), keyed without the prefix.
    validation: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Problem:
    """A fault found in the inventory: the file (and line) it is in, the host where one is
    named, and how to fix it."""

    host: str | None
    where: str
    what: str
    hint: str | None = None

    def render(self) -> str:
        who = f"host {self.host}: " if self.host else ""
        text = f"{self.where}: {who}{self.what}"
        return text + (f"\n  how to fix: {self.hint}" if self.hint else "")


@dataclass
class InventoryReport:
    path: Path
    hosts: dict[str, HostSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # every host's variables as Ansible resolved them, and Ansible's inventory itself
    # (for --limit patterns): kept so that nothing downstream parses the inventory again
    vars: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    manager: Any = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "inventory": str(self.path), "ok": self.ok,
            "hosts": {n: h.as_dict() for n, h in self.hosts.items()},
            "problems": [p.__dict__ for p in self.problems],
        }


_INI_SECTION = re.compile(r"^\s*\[([^\]]+)\]\s*$")


def _ini_duplicate_hosts(path: Path) -> list[Problem]:
    """A host listed twice in the same INI group is almost always a copy-paste error."""
    problems: list[Problem] = []
    section = "ungrouped"
    seen: dict[tuple[str, str], int] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip() if not raw.lstrip().startswith(
            ("#", ";")) else ""
        if not line:
            continue
        m = _INI_SECTION.match(line)
        if m:
            section = m.group(1)
            continue
        if ":" in section:  # [group:vars] / [group:children] list no hosts
            continue
        host = line.split()[0]
        key = (section, host)
        if key in seen:
            problems.append(Problem(host, f"{path}:{lineno}",
                                    f"listed twice in group [{section}] (first at line "
                                    f"{seen[key]})", "remove the duplicate line"))
        else:
            seen[key] = lineno
    return problems


def _parse_errors(path: Path) -> str | None:
    """Run ansible's own inventory plugin on the file and return its error, if any."""
    from ansible.inventory.data import InventoryData
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader

    plugin_name = "yaml" if path.suffix in (".yml", ".yaml", ".json") else "ini"
    plugin = inventory_loader.get(plugin_name)
    try:
        plugin.parse(InventoryData(), DataLoader(), str(path.resolve()), cache=False)
    except Exception as exc:  # ansible raises many error types; all mean "unparsable"
        return f"{plugin_name} inventory plugin: {exc}"
    return None


def _closest(name: str) -> str | None:
    hits = difflib.get_close_matches(name, list(BY_NAME), n=1)
    return hits[0] if hits else None


def _as_int(value: Any) -> int | None:
    # INI `[group:vars]` values arrive as strings; inline host vars as ints.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _coerce(var: str, kind: str, raw: Any, *, matrix: Matrix, known_stacks: set[str],
            bad: Callable[..., None]) -> Any:
    """The value of one nodecert_* variable, or None after reporting why it is bad."""
    if kind in ("int", "int+"):
        num = _as_int(raw)
        if num is None or num < (1 if kind == "int+" else 0):
            need = "a positive integer" if kind == "int+" else "an integer >= 0"
            bad(f"{var} must be {need}, got {raw!r}")
        else:
            return num
    elif kind == "bool":
        text = str(raw).strip().lower()
        if isinstance(raw, bool):
            return raw
        if text in _TRUE | _FALSE:
            return text in _TRUE
        bad(f"{var} must be true or false, got {raw!r}")
    elif kind == "str":
        return str(raw)
    elif kind == "secret":
        return None  # read where it is used, never kept in the spec (plain text is refused)
    elif kind == "list":
        items = raw if isinstance(raw, list) else str(raw).split(",")
        return [str(i).strip() for i in items if str(i).strip()]
    elif kind in MAPPING_KINDS:
        value, why = parse_mapping(kind, raw)
        if value is not None:
            return value
        bad(f"{var} {why}", EXAMPLES[kind])
    elif kind == "gpu":
        try:
            return matrix.gpu(str(raw)).key
        except UnknownNameError as exc:
            bad(f"{var}: unknown GPU model {raw!r}", exc.hint)
    elif kind == "os":
        if raw in SUPPORTED_OS:
            return raw
        bad(f"{var}: unsupported OS {raw!r}", f"use one of: {', '.join(SUPPORTED_OS)}")
    elif kind == "stack":
        if raw in known_stacks:
            return raw
        bad(f"{var}: no stack named {raw!r}",
            f"known stacks: {', '.join(sorted(known_stacks))}")
    return None


# A host name becomes a directory, a file name, a link on the fleet page and a label in
# a certificate: letters, digits, dot, dash and underscore, starting with a letter or a
# digit (an Ansible host name or an address), at most 253 characters.
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
# Variables that hold secrets (Ansible's connection/become passwords and anything named
# like a password, secret or token).
SECRET_VAR = re.compile(r"(pass(word|wd)?|secret|token|api_?key)$|_pass_|password",
                        re.IGNORECASE)
# SSH options that would accept any host key: StrictHostKeyChecking with any value but
# yes/true (no, off, false, accept-new, ask, a typo), and an empty known_hosts.
WEAK_SSH = re.compile(r"StrictHostKeyChecking[\"']?(?:\s*=\s*|\s+)[\"']?"
                      r"(?!(?:yes|true)(?![\w-]))[^\s\"']*"
                      r"|UserKnownHostsFile[\"']?(?:\s*=\s*|\s+)[\"']?/dev/null",
                      re.IGNORECASE)
# What may name the node's Python (it reaches a remote shell): a path or a command name.
PYTHON_NAME = re.compile(r"^[A-Za-z0-9_./+-]{1,200}$")


def _validate_host(name: str, hv: dict[str, Any], where: str, matrix: Matrix, *,
                   known_stacks: set[str], problems: list[Problem]) -> dict[str, Any]:
    """Check one host's nodecert_* variables; append problems, return the valid values."""
    def bad(what: str, hint: str | None = None) -> None:
        problems.append(Problem(name, where, what, hint))

    for var in sorted(str(k) for k in hv if SECRET_VAR.search(str(k))):
        value = hv[var]
        # Vault-encrypted values stay encrypted wherever nodecert copies the inventory
        # (a vaulted value is never compared or printed: that would try to decrypt it)
        if not is_vaulted(value) and value not in (None, ""):
            bad(f"{var} is set in plain text (the value is not shown): a run records its "
                "inventory, so a secret written here would end up in the run directory",
                "encrypt it with ansible-vault, or pass it at run time (a password file "
                "named in ansible.cfg, --ask-become-pass); use SSH keys for login")
    for var in ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args"):
        weak = WEAK_SSH.search(str(hv.get(var) or ""))
        if weak:
            bad(f"{var} turns host key checking off ({weak.group(0)})",
                "nodecert checks host keys always: add the hosts' keys to a known_hosts file "
                "(UserKnownHostsFile=...) and keep StrictHostKeyChecking=yes")
    for var in ("ansible_host_key_checking", "ansible_ssh_host_key_checking"):
        if str(hv.get(var, "true")).strip().lower() in _FALSE:
            bad(f"{var} is false", "nodecert checks host keys always: remove it")
    if not HOST_NAME.match(name) or ".." in name:
        bad(f"host name {name!r} is not a safe name (it names files, links and "
            "certificates)", "use letters, digits, '.', '-' and '_' (and ansible_host for "
            "the address)")
    interp = str(hv.get("ansible_python_interpreter") or "python3")
    if "{{" not in interp and not PYTHON_NAME.match(interp):
        bad(f"ansible_python_interpreter {interp!r} is not a path or command name",
            "name the interpreter, e.g. /usr/bin/python3")

    for var in sorted(k for k in hv if str(k).startswith("nodecert_")):
        if var not in BY_NAME:
            guess = _closest(var)
            bad(f"unknown variable {var}", f"did you mean {guess}?" if guess else
                "see docs/inventory.md for the variables")
    values: dict[str, Any] = {}
    for v in VARIABLES:
        raw = hv.get(v.name)
        if raw is None:
            if v.required:
                bad(f"missing {v.name} ({v.doc})", f"set {v.name} in host vars or group_vars")
            continue
        value = _coerce(v.name, v.kind, raw, matrix=matrix, known_stacks=known_stacks,
                        bad=bad)
        if value is not None:
            values[v.name] = value
    return values


# Files Ansible skips in an inventory directory (its inventory_ignore_extensions).
_IGNORED_SUFFIXES = (".orig", ".ini~", ".cfg", ".retry", ".pyc", ".pyo", ".md", ".txt", ".rst")


def inventory_sources(path: Path) -> list[Path]:
    """The inventory files: the file itself, or each file of an inventory directory
    (group_vars/ and host_vars/ are variables, not sources)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")
                  and not p.name.endswith(_IGNORED_SUFFIXES))


def _source_problems(path: Path) -> list[Problem]:
    """Per-file checks ansible-core's plugins do not make (duplicate keys and hosts)."""
    if os.access(path, os.X_OK) and not path.suffix:
        return []  # an inventory script: Ansible runs it
    if path.suffix in (".yml", ".yaml"):
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.load(text, Loader=UniqueKeyLoader)
        except ManifestError as exc:
            return [Problem(None, f"{path}:{(exc.where or '').rsplit(':', 1)[-1]}",
                            exc.what, exc.hint)]
        if isinstance(data, dict) and "plugin" in data:
            return []  # an inventory plugin's configuration (constructed, ...)
    error = _parse_errors(path)
    if error:
        return [Problem(None, str(path), f"not a valid inventory: {error}")]
    return [] if path.suffix in (".yml", ".yaml") else _ini_duplicate_hosts(path)


def _unparsable(path: Path) -> list[Problem]:
    """What keeps the inventory from being parsed at all: it is absent, or one of its
    sources is no inventory (ansible-core would skip it with a warning)."""
    if not path.is_file() and not path.is_dir():
        return [Problem(None, str(path), "inventory does not exist",
                        "pass an INI or YAML inventory file or an inventory directory, "
                        "e.g. inventory/sample/lab.ini")]
    ansible_quiet()
    for source in inventory_sources(path):
        problems = _source_problems(source)
        if problems:
            return problems
    return []


def check_inventory(path: Path, matrix: Matrix | None = None) -> InventoryReport:
    """Parse with ansible-core and validate every host's spec; never raises on bad content."""
    matrix = matrix or default_matrix()
    report = InventoryReport(path)
    report.problems.extend(_unparsable(path))
    if report.problems:
        return report

    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[str(path.resolve())])
    vm = VariableManager(loader=loader, inventory=inv)
    hosts = inv.get_hosts()
    if not hosts:
        report.problems.append(Problem(None, str(path), "inventory defines no hosts",
                                       "add at least one host line under a group"))
        return report

    known_stacks = {p.stem for p in stack_paths()}
    endpoints: dict[tuple[str, int], str] = {}
    trays: list[TrayInfo] = []
    report.manager = inv
    for host in sorted(hosts, key=lambda h: h.name):
        hv = vm.get_vars(host=host)
        report.vars[host.name] = dict(hv)
        values = _validate_host(host.name, hv, str(path), matrix, known_stacks=known_stacks,
                                problems=report.problems)
        if "nodecert_rack" in values and all(v in values for v in REQUIRED):
            trays.append(TrayInfo(host.name, values["nodecert_rack"],
                                  _racks_named(host, loader, inv),
                                  values["nodecert_gpu_model"], values["nodecert_gpu_count"]))
        address = str(hv.get("ansible_host", host.name))
        port = _as_int(hv.get("ansible_port", 22)) or 22
        other = endpoints.get((address, port))
        if other is not None:
            report.problems.append(Problem(
                host.name, str(path),
                f"same address {address}:{port} as host {other}: one machine listed twice",
                "give each host its own ansible_host, or remove the duplicate"))
        endpoints[(address, port)] = host.name
        safe = HOST_NAME.match(host.name) and ".." not in host.name
        if safe and all(v in values for v in REQUIRED):
            report.hosts[host.name] = HostSpec(
                name=host.name, address=address, port=port,
                groups=tuple(sorted(g.name for g in host.get_groups() if g.name != "all")),
                **{v.key: values.get(v.name, v.default) for v in ORDER},
                validation={v.key: values[v.name] for v in VALIDATION if v.name in values})
    _check_racks(report, trays, str(path))
    _check_cabling_plans(report, str(path))
    return report


def _check_cabling_plans(report: InventoryReport, where: str) -> None:
    """Every cable plan the hosts name, read against the inventory's hosts: a plan with
    errors is refused naming its file and line."""
    from nodecert.inventory.cableplan import PlanError, read_plan

    plans: dict[str, list[str]] = {}
    for name, spec in report.hosts.items():
        plan = spec.validation.get("cabling_plan")
        if plan:
            plans.setdefault(str(plan), []).append(name)
    for plan, named_by in sorted(plans.items()):
        try:
            read_plan(Path(plan).expanduser(), hosts=set(report.hosts))
        except PlanError as exc:
            report.problems.append(Problem(
                named_by[0], exc.where or where, exc.what,
                exc.hint or "fix the cable plan where named (nodecert_cabling_plan names "
                            "it)"))


def _racks_named(host: Any, loader: Any, inv: Any) -> dict[str, str]:
    """rack name -> where it is set, over the host's own variables and every group's (the
    inventory's and their host_vars/group_vars files): two names mean a tray put in two
    racks, which Ansible's merge would settle silently by keeping one."""
    from ansible.vars.plugins import get_vars_from_inventory_sources

    def own(entity: Any) -> dict[str, Any]:
        files = get_vars_from_inventory_sources(loader, inv._sources, [entity], "task")
        return {**entity.get_vars(), **files}

    named: dict[str, str] = {}
    sources = [(f"host {host.name}", own(host))] + [
        (f"group {g.name}", own(g)) for g in host.get_groups()]
    for where, hv in sources:
        spec, _ = parse_mapping("rack", hv["nodecert_rack"]) if "nodecert_rack" in hv \
            else (None, None)
        if spec is not None:
            named.setdefault(str(spec["name"]), where)
    return named


def _check_racks(report: InventoryReport, trays: list[TrayInfo], where: str) -> None:
    """The rules across a rack's trays; each tray's plan learns the trays of its rack."""
    for host, what, hint in rack_problems(trays):
        report.problems.append(Problem(host, where, what, hint))
    members: dict[str, list[str]] = {}
    for t in trays:
        members.setdefault(t.rack["name"], []).append(t.host)
    for t in trays:
        spec = report.hosts.get(t.host)
        if spec is not None and "rack" in spec.validation:
            names = sorted(members[t.rack["name"]])
            # each tray's address, so the node can name a tray IMEX lacks by host and
            # address (IMEX lists addresses only)
            spec.validation["rack"] = {
                **spec.validation["rack"], "trays": names,
                "tray_addresses": {h: report.hosts[h].address for h in names
                                   if h in report.hosts}}


@dataclass(frozen=True)
class Inventory:
    """An inventory read, checked and resolved once: its hosts' order specs, every
    host's variables as Ansible resolves them, and Ansible's inventory for --limit
    patterns. A command reads it once (`Inventory.read`) and passes it down; every
    function that takes an inventory takes this or a path (`resolve`)."""

    path: Path
    hosts: dict[str, HostSpec]
    vars: dict[str, dict[str, Any]] = field(repr=False)
    manager: Any = field(repr=False, compare=False)

    def __str__(self) -> str:  # messages name the inventory by its path
        return str(self.path)

    @classmethod
    def read(cls, path: Path, matrix: Matrix | None = None) -> Inventory:
        """The inventory, or InventoryError listing every problem found."""
        report = check_inventory(path, matrix)
        if not report.ok:
            raise InventoryError(
                f"{len(report.problems)} problem(s) in the inventory:\n"
                + "\n".join("  " + p.render().replace("\n", "\n  ") for p in report.problems),
                where=str(path))
        return cls(path, report.hosts, report.vars, report.manager)

    def hostvars(self, hosts: list[str]) -> dict[str, dict[str, Any]]:
        return {h: self.vars[h] for h in hosts}

    def select(self, patterns: tuple[str, ...], known: list[str]) -> list[str]:
        """--limit as Ansible reads it (select_hosts), on this inventory."""
        return select_hosts(self.path, patterns, known, manager=self.manager)


def resolve(inventory: Path | Inventory) -> Inventory:
    """`inventory` read once where it is still a path; as it is where it was read."""
    return inventory if isinstance(inventory, Inventory) else Inventory.read(inventory)


def hostvars(inventory: Path | Inventory, hosts: list[str]) -> dict[str, dict[str, Any]]:
    """Each host's variables as Ansible resolves them (one inventory parse, none for an
    inventory already read)."""
    if isinstance(inventory, Inventory):
        return inventory.hostvars(hosts)
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[str(inventory.resolve())])
    vm = VariableManager(loader=loader, inventory=inv)
    return {h: dict(vm.get_vars(host=inv.get_host(h))) for h in hosts}



def load_inventory(path: Path | Inventory, matrix: Matrix | None = None
                   ) -> dict[str, HostSpec]:
    """All host specs, or InventoryError listing every problem found."""
    if isinstance(path, Inventory):
        return path.hosts
    return Inventory.read(path, matrix).hosts
