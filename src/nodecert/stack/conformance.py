"""Conformance: is a provisioned host exactly what the stack pins?

One SSH round trip per host (strict host-key checking, with the inventory's own
connection settings) gathers the facts; pure functions judge them: every pinned
package installed at its exact version and held, the services enabled and
running, `nvidia-smi` reporting the pinned driver, the framework environment
holding the pinned wheels.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from nodecert.core.shell import CommandError, run
from nodecert.stack.manifest import Stack
from nodecert_node.contract import COMPUTE_DOMAINS, Result, Verdict

SCRIPT = r"""
export LC_ALL=C
echo '##os'
. /etc/os-release && echo "$ID-$VERSION_ID"
echo '##pkgs'
dpkg-query -W -f='${{Package}}\t${{Version}}\t${{db:Status-Abbrev}}\n' {names} 2>/dev/null
echo '##holds'
apt-mark showhold
echo '##nvswitch'
lspci -nn -d 10de: 2>/dev/null | grep -c '\[0680\]' || true
echo '##services'
for s in nvidia-persistenced nvidia-fabricmanager nvidia-imex; do
  en=$(systemctl is-enabled "$s" 2>/dev/null || echo missing)
  echo "$s $en $(systemctl is-active "$s" 2>/dev/null || true)"
done
echo '##smi'
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 1
echo '##module'
cat /sys/module/nvidia/version 2>/dev/null || true
echo '##freeze'
cat {env}/pip-freeze.txt 2>/dev/null || true
echo '##kernel'
uname -r
echo '##pagesize'
getconf PAGE_SIZE 2>/dev/null || true
"""


@dataclass
class Conformance:
    host: str
    problems: list[str] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "ok": self.ok, "checked": self.checked,
                "problems": self.problems}


def ssh_argv(hostvars: dict[str, Any], host: str) -> list[str]:
    """ssh command line from Ansible connection variables, host keys checked strictly."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=10"]
    if hostvars.get("ansible_port"):
        argv += ["-p", str(hostvars["ansible_port"])]
    if hostvars.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(hostvars["ansible_ssh_private_key_file"])]
    argv += shlex.split(str(hostvars.get("ansible_ssh_common_args", "")))
    user = hostvars.get("ansible_user", "root")
    return [*argv, f"{user}@{hostvars.get('ansible_host', host)}"]


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cur = ""
    for line in text.splitlines():
        if line.startswith("##"):
            cur = line[2:]
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def software(output: str) -> dict[str, Any]:
    """What is installed, as gathered (the software bill of materials a certificate
    binds): OS, the running kernel and its page size, pinned packages with versions and
    hold state, nvidia-smi's driver, the loaded kernel module, the framework
    environment's pip freeze."""
    sec = _sections(output)
    pkgs = {}
    for line in sec.get("pkgs", []):
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0]:
            pkgs[parts[0]] = parts[1]
    holds = {h.strip() for h in sec.get("holds", []) if h.strip()}
    page = (sec.get("pagesize") or [""])[0].strip()
    return {"os": (sec.get("os") or [""])[0].strip(),
            # absent from a run gathered before they were asked for: None, never ""
            "kernel": (sec.get("kernel") or [""])[0].strip() or None,
            "page_size": int(page) if page.isdigit() else None,
            "packages": {n: {"version": v, "held": n in holds} for n, v in sorted(pkgs.items())},
            "driver_reported": (sec.get("smi") or [""])[0].strip(),
            "kernel_module": (sec.get("module") or [""])[0].strip(),
            "python": sorted(x.strip() for x in sec.get("freeze", []) if x.strip())}


def _no_fabric_manager(c: Conformance, stack: Stack, os_name: str,
                       installed: dict[str, tuple[str, str]],
                       services: dict[str, list[str]]) -> None:
    """A compute tray of an NVLink domain (GB200/GB300: no NVSwitch of its own, the
    switch trays run the fabric, IMEX shares memory across trays) carries no Fabric
    Manager (docs/rack.md): installed or running there, it is a finding, never silent."""
    c.checked += 1
    names = [p.name for p in stack.os[os_name].packages if p.component == "fabric_manager"]
    present = [f"{n} {installed[n][0]}" for n in names
               if n in installed and len(installed[n][1]) >= 2 and installed[n][1][1] == "i"]
    state = services.get("nvidia-fabricmanager", [])
    running = len(state) > 1 and state[1] == "active"
    if present or running:
        what = "; ".join(present + (["service nvidia-fabricmanager active"] if running
                                    else []))
        c.problems.append(f"Fabric Manager on a compute tray of an NVLink domain ({what}): "
                          "the rack's switch trays run the NVLink fabric and IMEX shares "
                          "memory across trays; stop and purge nvidia-fabricmanager here")


def _packages(c: Conformance, stack: Stack, os_name: str, sec: dict[str, list[str]], *,
              imex: bool, nvswitch: bool) -> dict[str, tuple[str, str]]:
    """Each pinned package of the host's OS installed at its version and held; returns
    what dpkg lists as installed (name -> (version, status))."""
    installed = {}
    for line in sec.get("pkgs", []):
        parts = line.split("\t")
        if len(parts) == 3:
            installed[parts[0]] = (parts[1], parts[2].strip())
    holds = set(sec.get("holds", []))
    for p in stack.os[os_name].packages:
        if p.component in ("fabric_manager", "nscq") and not nvswitch:
            continue  # Fabric Manager belongs only on NVSwitch systems
        if p.component == "imex" and not imex:
            continue  # IMEX belongs only on the compute trays of an NVLink domain
        c.checked += 1
        got = installed.get(p.name)
        # db:Status-Abbrev: selection (i install, h hold, ...), then state (i installed).
        if got is None or len(got[1]) < 2 or got[1][1] != "i":
            c.problems.append(f"{p.name} is not installed (pinned {p.version})")
        elif got[0] != str(p.version):
            c.problems.append(f"{p.name} is {got[0]}, pinned {p.version}")
        elif p.name not in holds or got[1][0] != "h":
            c.problems.append(f"{p.name} {p.version} is not held against upgrades")
    return installed


def judge(host: str, stack: Stack, output: str, *, imex: bool | str = False) -> Conformance:
    """Pure: compare gathered facts with the stack's pins for the host's OS. `imex`: the
    host is a compute tray of a rack that expects an IMEX domain (only there is IMEX
    part of the stack): True, its service running; COMPUTE_DOMAINS, the package without
    its host service (the customer's Kubernetes runs IMEX)."""
    c = Conformance(host)
    sec = _sections(output)
    os_name = (sec.get("os") or [""])[0].strip()
    if os_name not in stack.os:
        c.problems.append(f"host runs {os_name or 'an unknown OS'}; stack {stack.name} pins "
                          f"nothing for it")
        return c
    nvswitch = int((sec.get("nvswitch") or ["0"])[0] or 0) > 0
    installed = _packages(c, stack, os_name, sec, imex=bool(imex), nvswitch=nvswitch)
    services = {ln.split()[0]: ln.split()[1:] for ln in sec.get("services", []) if ln.split()}
    if imex and not nvswitch:
        _no_fabric_manager(c, stack, os_name, installed, services)
    wanted = (["nvidia-persistenced"] + (["nvidia-fabricmanager"] if nvswitch else [])
              + (["nvidia-imex"] if imex is True and stack.imex else []))
    if imex == COMPUTE_DOMAINS and stack.imex:
        c.checked += 1
        state = services.get("nvidia-imex", ["missing", ""])
        if state[1:2] == ["active"] or state[:1] == ["enabled"]:
            c.problems.append(f"service nvidia-imex is {'/'.join(s for s in state if s)}: "
                              "the rack's IMEX is the customer's ComputeDomains, the host "
                              "service must be stopped and masked")
    for svc in wanted:
        c.checked += 1
        state = services.get(svc, ["missing", ""])
        if state[:2] != ["enabled", "active"]:
            c.problems.append(f"service {svc} is {'/'.join(s for s in state if s)}, "
                              "not enabled and active")
    smi = (sec.get("smi") or [""])[0].strip()
    c.checked += 1
    if smi != str(stack.driver):
        c.problems.append(f"nvidia-smi reports driver {smi!r}, pinned {stack.driver}")
    module = (sec.get("module") or [""])[0].strip()
    if module:  # absent where no kernel module is loaded (lab hosts): nothing to compare
        c.checked += 1
        if module != str(stack.driver):
            c.problems.append(f"the loaded kernel module is {module}, pinned {stack.driver}: "
                              "reboot (or reload the nvidia modules) to run the pinned driver")
    freeze = set(sec.get("freeze", []))
    fw = stack.framework
    for req in ([f"torch=={fw.pytorch}"] if fw.pytorch else []) + (
            [f"tensorflow=={fw.tensorflow}"] if fw.tensorflow else []):
        c.checked += 1
        if req not in freeze:
            c.problems.append(f"framework environment lacks {req}")
    return c


def env_dir(stack: Stack) -> str:
    """Where the framework role puts the stack's Python environment on a node."""
    return f"/opt/nodecert/envs/{stack.name}"


def script_for(stack: Stack, env: str | None = None) -> str:
    """The gathering script (shell) whose output `judge` reads."""
    names = " ".join(sorted({shlex.quote(p.name) for pins in stack.os.values()
                             for p in pins.packages}))
    return SCRIPT.format(names=names, env=shlex.quote(env or env_dir(stack)))


def check_host(host: str, hostvars: dict[str, Any], stack: Stack, env: str | None = None,
               timeout: float = 120, *, imex: bool | str = False) -> Conformance:
    script = script_for(stack, env)
    try:
        proc = run([*ssh_argv(hostvars, host), script], timeout=timeout, check=False)
    except CommandError as exc:
        return Conformance(host, [f"conformance check could not run: {exc.what}"])
    if proc.returncode == 255:
        return Conformance(host, [f"conformance check could not connect: "
                                  f"{proc.stderr.strip()[-300:]}"])
    return judge(host, stack, proc.stdout, imex=imex)


__all__ = ["Conformance", "check_host", "env_dir", "imex_expected", "judge", "script_for",
           "software", "ssh_argv"]


def imex_expected(spec: dict[str, Any]) -> bool | str:
    """Whether a host's plan spec makes it a compute tray of a rack expecting IMEX: True
    (the host's service), COMPUTE_DOMAINS (the customer's Kubernetes runs it) or False."""
    rack = spec.get("rack")
    imex = rack.get("imex") if isinstance(rack, dict) else None
    return COMPUTE_DOMAINS if imex == COMPUTE_DOMAINS else bool(imex)


def judge_result(res: Result, host: str, stack: Stack | None, *, imex: bool | str = False
                 ) -> Result:
    """Turn the node's gathered conformance facts into the judged Result (`imex`: the
    host is a compute tray of a rack that expects an IMEX domain)."""
    output = res.facts.get("conformance_output")
    if stack is None or (output is None and res.verdict not in (Verdict.PASS, Verdict.WARN)):
        return res  # nothing to judge against, or the node's own failure stands
    if output is None:  # the node's PASS/WARN is not a conformance judgement
        return res.with_(verdict=Verdict.ERROR, findings=(),
                         summary=f"stack {stack.name}: the node reported no conformance "
                                 "output: the installed stack was not judged",
                         fault_code="NC-STACK-NOT-MEASURED",
                         remediation="Re-run `nodecert validate` for this host; if it "
                                     "repeats, run the conformance script by hand and "
                                     "see why it prints nothing.")
    c = judge(host, stack, str(output), imex=imex)
    base = res.with_(value={"checked": c.checked, "problems": len(c.problems)},
                     facts={"stack": stack.name,
                            "software": software(str(output))},
                     fault_code="", remediation="")
    if c.ok:
        return base.with_(verdict=Verdict.PASS,
                          summary=f"stack {stack.name}: all {c.checked} pinned items installed, "
                                  "held and running")
    more = f" (+{len(c.problems) - 1} more)" if len(c.problems) > 1 else ""
    return base.with_(verdict=Verdict.FAIL, summary=f"stack {stack.name}: {c.problems[0]}{more}",
                      findings=tuple(c.problems), fault_code="NC-STACK-DRIFT",
                      remediation=f"Re-run `nodecert provision --stack {stack.name}` on this "
                                  "host (or find who changed it), then validate again.")
