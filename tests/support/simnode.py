"""Run the node-side validators against the hardware simulator, without a lab host.

The simulator plays the hardware boundary exactly as inside a lab host: the
tools (nvidia-smi, lspci, dmesg, dmidecode, lscpu, lsblk) are wrappers around
simhw.py on PATH, reading a hardware description and installed-package markers
from a temp dir. The checks run in a child process as on a node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nodecert.lab.hardware import Fault, hardware_description, spec_vars
from nodecert_node.contract import Result, Verdict
from support.env import REPO

SIMHW = REPO / "src" / "nodecert" / "lab" / "simhw" / "simhw.py"
VALIDATORS = REPO / "validators"
TOOLS = ("nvidia-smi", "lspci", "dmesg", "dmidecode", "lscpu", "lsblk", "all_reduce_perf",
         "nvbandwidth", "dcgmi", "gpu_burn", "ibstat", "ibstatus", "perfquery", "show_gids",
         "mlnx_qos", "lsmod", "sysctl", "cpupower", "modprobe")
# The r580 stack's simulated packages a provisioned node carries (also used by test_simhw).
STACK_580 = {"driver": ("nvidia-driver-580-server-open", "580.173.02-0ubuntu0.24.04.1"),
              "fabric_manager": ("nvidia-fabricmanager-580", "580.173.02-0ubuntu0.24.04.1"),
              "cuda": ("cuda-libraries-13-0", "13.0.0-1"),
              "nccl": ("libnccl2", "2.27.7-1+cuda13.0"),
              "dcgm": ("datacenter-gpu-manager-4-cuda13", "1:4.4.2-1")}

FAKE_SCONTROL = r"""#!/bin/sh
# A fake Slurm scontrol: node state in $FAKE_SLURM (State and Reason lines).
S=$FAKE_SLURM
case "$1" in
  show) . "$S"; echo "NodeName=$2 Arch=x86_64 CoresPerSocket=56"
        echo "   State=$STATE ThreadsPerCore=2"
        [ -n "$REASON" ] && echo "   Reason=$REASON [root@2026-11-29T10:00:00]"; exit 0;;
  update) shift; st=""; rs=""
        for a in "$@"; do
          case "$a" in State=*) st=${a#State=};; Reason=*) rs=${a#Reason=};; esac
        done
        echo "$*" >> "$S.log"
        if [ "$st" = RESUME ]; then printf 'STATE=IDLE\nREASON=\n' > "$S"
        else printf 'STATE=IDLE+DRAIN\nREASON="%s"\n' "$rs" > "$S"; fi; exit 0;;
esac
exit 1
"""


class SimNode:
    def __init__(self, tmp: Path, profile: str = "h200-sxm-8",
                 faults: list[dict[str, Any]] | None = None,
                 installed: dict[str, tuple[str, str]] | None = None,
                 fabricmanager: str = "active") -> None:
        self.tmp = tmp
        self.profile = profile
        self.bin = tmp / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.inst = tmp / "installed"
        self.inst.mkdir(exist_ok=True)
        self.hw = tmp / "hardware.json"
        fl = [Fault("*", f["kind"], {k: v for k, v in f.items() if k != "kind"})
              for f in faults or []]
        self.hw.write_text(json.dumps(hardware_description(
            lab_seed="test", host="h1", profile_name=profile, mac="02:6e:63:00:00:01",
            faults=fl, boot_time=time.time() - 600)))
        for comp, (name, version) in (STACK_580 if installed is None else installed).items():
            (self.inst / f"{name}.json").write_text(json.dumps(
                {"package": name, "version": version, "component": comp}))
        for tool in TOOLS:
            w = self.bin / tool
            w.write_text(f"#!/bin/sh\nexec {sys.executable} {SIMHW} {tool} \"$@\"\n")
            w.chmod(0o755)
        # systemd is not simulated hardware: a stand-in answers `is-active` only.
        sc = self.bin / "systemctl"
        sc.write_text(f"#!/bin/sh\necho {fabricmanager}\n")
        sc.chmod(0o755)

    def env(self) -> dict[str, str]:
        return dict(os.environ, NODECERT_LAB_HW=str(self.hw),
                    NODECERT_LAB_INSTALLED=str(self.inst),
                    NODECERT_LAB_RUN=str(self.tmp / "run"),
                    PATH=f"{self.bin}:{os.environ.get('PATH', '')}",
                    NODECERT_SIMULATED_MARK=str(self.hw),  # the sim is simulated hardware
                    NODECERT_LAB_SIMHW=str(SIMHW),
                    PYTHONPATH=str(VALIDATORS))

    def framework_env(self, stack: str = "r580-cuda13.0") -> dict[str, Any]:
        """A stack environment holding the lab's SIMULATED torch (as the lab's mirror
        builds it) and the plan's framework entry that points at it."""
        from nodecert.lab.wheelhouse import TORCH_BUNDLES, _torch_files
        from nodecert.stack.manifest import find_stack
        from nodecert.validation.plan import framework_plan
        st = find_stack(stack)
        t = st.framework.pytorch
        assert t is not None
        site = self.tmp / "fwenv" / "site"
        for rel, text in _torch_files(str(t), t.cuda, *TORCH_BUNDLES[t.release][t.cuda]).items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        py = self.tmp / "fwenv" / "bin" / "python"
        py.parent.mkdir(parents=True, exist_ok=True)
        py.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
        py.chmod(0o755)
        return {**framework_plan(st), "python": str(py)}

    def plan(self, checks: list[str], **options: Any) -> dict[str, Any]:
        from nodecert.inventory.fabric import parse_fabric
        from nodecert.inventory.reader import HostSpec
        from nodecert.profiles import thresholds
        from nodecert.validation.plan import build_plan
        sv = spec_vars(self.profile)
        validation = options.pop("validation", {})
        if "nodecert_fabric" in sv:  # the order's fabric, as the lab inventory states it
            validation.setdefault("fabric", parse_fabric(sv["nodecert_fabric"])[0])
        spec = HostSpec(name="h1", address="127.0.0.1", port=22, groups=(),
                        gpu_model=sv["nodecert_gpu_model"], gpu_count=sv["nodecert_gpu_count"],
                        cpu_cores=sv["nodecert_cpu_cores"], ram_gb=sv["nodecert_ram_gb"],
                        nvme_count=sv["nodecert_nvme_count"],
                        nvme_min_gb=sv["nodecert_nvme_min_gb"], simulated=True,
                        validation=validation)
        plan = build_plan(spec, thresholds.suite(options.pop("suite", "quick")), None, "test",
                          cli_thresholds=options.pop("cli_thresholds", {}),
                          scratch=options.pop("scratch", None), checks=tuple(checks)).as_dict()
        # A short counter window: the simulated counters grow at their own rate.
        plan["options"]["fabric"] = {**plan["options"].get("fabric", {}),
                                     "counter_window_s": 0.5}
        plan["options"].update(options)  # a dict, as the node receives it: tests edit it
        return plan

    def tool(self, name: str, *args: str) -> str:
        """A simulated tool's output, as a check on the node would read it."""
        p = subprocess.run([str(self.bin / name), *args], capture_output=True, text=True,
                           env=self.env(), timeout=60, check=True)
        return p.stdout

    def check(self, name: str, plan: dict[str, Any] | None = None, **options: Any) -> Result:
        plan = plan or self.plan([name], **options)
        p = subprocess.run([sys.executable, "-m", "nodecert_node", "check", name],
                           input=json.dumps(plan), capture_output=True, text=True,
                           env=self.env(), cwd=VALIDATORS, timeout=120, check=False)
        assert p.returncode == 0, p.stderr
        return Result.from_dict(json.loads(p.stdout.strip().splitlines()[-1]))

    def suite(self, plan: dict[str, Any]) -> list[dict[str, Any]]:
        """`run --plan` as the node runs it: the JSON events."""
        path = self.tmp / "plan.json"
        path.write_text(json.dumps(plan))
        p = subprocess.run([sys.executable, "-m", "nodecert_node", "run", "--plan", str(path)],
                           capture_output=True, text=True, env=self.env(), cwd=VALIDATORS,
                           timeout=600, check=False)
        assert p.returncode == 0, p.stderr
        return [json.loads(line) for line in p.stdout.splitlines()]

    def suite_with_tool(self, tool: str, script: str,
                        plan: dict[str, Any]) -> list[dict[str, Any]]:
        """The suite with one simulated tool replaced by a shell script (a hung or
        misbehaving tool), the tool put back after."""
        path = self.bin / tool
        real = path.read_text()
        path.write_text(script)
        try:
            return self.suite(plan)
        finally:
            path.write_text(real)

    def tool_script(self, tool: str) -> str:
        """The simulated tool's own script."""
        return (self.bin / tool).read_text()


HW_CHECKS = ["hardware.inventory", "hardware.pcie", "hardware.topology", "net.ib", "net.roce",
             "health.gpu", "health.xid"]


class Sim:
    def __init__(self, tmp: Path, profile: str = "h200-sxm-8",
                 faults: list[dict[str, Any]] | None = None,
                 installed: dict[str, tuple[str, str]] | None = None,
                 boot_time: float | None = None) -> None:
        self.dir = tmp
        self.hw = tmp / "hardware.json"
        self.inst = tmp / "installed"
        self.run_dir = tmp / "run"
        self.inst.mkdir(exist_ok=True)
        fl = [Fault("*", f["kind"], {k: v for k, v in f.items() if k != "kind"})
              for f in faults or []]
        desc = hardware_description(lab_seed="test", host="h1", profile_name=profile,
                                    mac="02:6e:63:00:00:01", faults=fl,
                                    boot_time=time.time() - 600 if boot_time is None
                                    else boot_time)
        self.hw.write_text(json.dumps(desc))
        for comp, (name, version) in (STACK_580 if installed is None else installed).items():
            (self.inst / f"{name}.json").write_text(json.dumps(
                {"package": name, "version": version, "component": comp}))

    def env(self) -> dict[str, str]:
        return dict(os.environ, NODECERT_LAB_HW=str(self.hw), NODECERT_LAB_INSTALLED=str(self.inst),
                    NODECERT_LAB_RUN=str(self.run_dir))

    def __call__(self, *args: str, timeout: float = 30,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([sys.executable, str(SIMHW), *args], env=self.env(),
                           capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert p.returncode == 0, p.stdout + p.stderr
        return p

    def load(self, gpus: list[int], started_s_ago: float) -> None:
        self.run_dir.mkdir(exist_ok=True)
        now = time.time()
        (self.run_dir / "load.json").write_text(json.dumps(
            {str(g): {"start": now - started_s_ago, "until": now + 600, "pid": os.getpid()}
             for g in gpus}))


def verdicts(node: SimNode) -> dict[str, tuple[Verdict, str]]:
    out = {}
    for name in HW_CHECKS:
        r = node.check(name)
        out[name] = (r.verdict, r.summary)
    return out


def failing(node: SimNode) -> dict[str, str]:
    return {k: s for k, (v, s) in verdicts(node).items() if v is not Verdict.PASS}

