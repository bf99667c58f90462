"""The lab's BMCs (`nodecert lab up --bmc`): one per host, on the lab bridge at its own
address, speaking real protocols with SIMULATED readings.

* A network namespace of their own, ``<prefix>-bmc`` (one veth on the lab bridge,
  ``<prefix>vb``), holding every BMC's address: host n's BMC is at .210+n of the lab
  subnet, as a BMC is a device of its own beside the host. No default route.
* Redfish over HTTPS on port 443: nodecert.lab.bmcsim (sushy-tools' static emulator
  behind TLS and Basic authentication, the tree rendered from the hardware model). Its
  certificate is signed by the lab's own CA (state/bmc/ca.pem), for the BMC's address.
* IPMI over LAN (RMCP+, port 623): OpenIPMI's ipmi_sim with an SDR repository compiled
  by sdrcomp, its sensors polled from the files bmcsim writes; threshold crossings are
  logged in its real SEL.
* One password for every BMC (state/bmc/password, 0600), which the lab's inventory names
  as the BMCs' password file; the fault bmc_bad_credentials gives one BMC another.

Long because a lab BMC's whole life is here: its namespace, CA and certificate, IPMI
configuration (SDRs, sensors, users), processes and readiness.

Every process runs in the BMC namespace, so `lab down` (and the clean-up of a crashed
run) stops exactly them: the processes of a namespace the lab created.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab import net
from nodecert.lab.bmcmodel import GOLDEN_FIRMWARE, PSUS, USERNAME, ipmi_sensors, psu_sensor_number
from nodecert.lab.bmcupdate import write_lab_images
from nodecert.lab.config import LabConfig
from nodecert.lab.hardware import Fault

MAX_BMC_HOSTS = 40
REDFISH_PORT = 443
IPMI_PORT = 623
READY_TIMEOUT_S = 30.0
TOOLS = {"ipmi_sim": "openipmi", "sdrcomp": "openipmi", "ipmitool": "ipmitool",
         "openssl": "openssl"}


def bmc_ip(cfg: LabConfig, n: int) -> ipaddress.IPv4Address:
    return cfg.subnet.network_address + 210 + n


def netns_name(cfg: LabConfig) -> str:
    return f"{cfg.prefix}-bmc"


def veth_name(cfg: LabConfig) -> str:
    return f"{cfg.prefix}vb"


def firmware_mirror(cfg: LabConfig) -> Path:
    """The lab's firmware images (SIMULATED), laid out as a mirror's firmware/."""
    return cfg.state / "firmware-mirror"


def root(cfg: LabConfig) -> Path:
    return cfg.state / "bmc"


def bmc_dir(cfg: LabConfig, n: int) -> Path:
    return root(cfg) / f"h{n}"


def inventory_spec(cfg: LabConfig, n: int) -> dict[str, Any]:
    """The host's nodecert_bmc as the lab's inventory writes it."""
    return {"address": str(bmc_ip(cfg, n)), "protocol": "redfish", "port": REDFISH_PORT,
            "ca_file": str(root(cfg) / "ca.pem"), "username": USERNAME,
            "password_file": str(root(cfg) / "password"), "firmware": [GOLDEN_FIRMWARE],
            "sample_s": 2, "timeout_s": 5}


def preflight() -> None:
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise NodecertError(f"the lab's BMCs need {', '.join(missing)}",
                            hint=f"apt-get install {' '.join(missing)}")
    if importlib.util.find_spec("sushy_tools") is None:
        raise NodecertError("the lab's Redfish BMCs need sushy-tools in nodecert's "
                            "environment", hint="install nodecert with its lab extra: "
                                                "pip install 'nodecert[lab]' (from a clone: "
                                                "pip install -e '.[lab]')") from None


# --- the namespace ---------------------------------------------------------------------------

def ns_up(cfg: LabConfig, numbers: list[int]) -> None:
    ns, veth = netns_name(cfg), veth_name(cfg)
    if ns not in _netns_list():
        run(["ip", "netns", "add", ns], timeout=15)
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
            timeout=15)
        run(["ip", "link", "set", veth, "master", cfg.bridge, "up"], timeout=15)
        run(["ip", "-n", ns, "link", "set", "lo", "up"], timeout=15)
        run(["ip", "-n", ns, "link", "set", "eth0", "up"], timeout=15)
    have = run(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"], timeout=15).stdout
    for n in numbers:
        if f" {bmc_ip(cfg, n)}/" not in have:
            run(["ip", "-n", ns, "addr", "add", f"{bmc_ip(cfg, n)}/{cfg.subnet.prefixlen}",
                 "dev", "eth0"], timeout=15)


def _netns_list() -> list[str]:
    out = run(["ip", "netns", "list"], timeout=15).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def present(cfg: LabConfig) -> bool:
    return netns_name(cfg) in _netns_list()


def down(cfg: LabConfig) -> int:
    """Stop every BMC process (those in the lab's BMC namespace) and remove the namespace
    and the BMCs' files; returns how many processes were stopped."""
    ns = netns_name(cfg)
    stopped = 0
    if ns in _netns_list():
        pids = net.netns_pids(ns)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                    stopped += sig == signal.SIGTERM
                except ProcessLookupError:
                    pass
            wait_gone(pids, 5.0)
        run(["ip", "netns", "del", ns], timeout=15, check=False)
    if net.link_exists(veth_name(cfg)):
        run(["ip", "link", "del", veth_name(cfg)], timeout=15, check=False)
    shutil.rmtree(root(cfg), ignore_errors=True)
    shutil.rmtree(firmware_mirror(cfg), ignore_errors=True)
    return stopped


def wait_gone(pids: list[int], timeout: float) -> None:
    """Block until every pid has exited (its pidfd becomes readable), at most timeout."""
    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except OSError:  # already gone
            continue
    try:
        deadline = time.monotonic() + timeout
        pending = list(fds)
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(pending, [], [], deadline - time.monotonic())
            pending = [fd for fd in pending if fd not in ready]
    finally:
        for fd in fds:
            os.close(fd)


# --- credentials and certificates ----------------------------------------------------------------

def _openssl(*args: str) -> None:
    run(["openssl", *args], timeout=60)


def ensure_ca(cfg: LabConfig) -> None:
    r = root(cfg)
    r.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not (r / "ca.pem").is_file():
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", str(r / "ca.key"), "-out", str(r / "ca.pem"),
                 "-days", "30", "-subj", "/CN=nodecert lab BMC CA")
    pw = r / "password"
    if not pw.is_file():
        fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(12) + "\n")  # IPMI 2.0: at most 20 bytes


def host_cert(cfg: LabConfig, d: Path, ip: str) -> None:
    if (d / "bmc.pem").is_file():
        return
    ext = d / "san.cnf"
    ext.write_text(f"subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(d / "bmc.key"), "-out", str(d / "bmc.csr"), "-subj",
             f"/CN={ip}")
    _openssl("x509", "-req", "-in", str(d / "bmc.csr"), "-CA", str(root(cfg) / "ca.pem"),
             "-CAkey", str(root(cfg) / "ca.key"), "-CAcreateserial", "-days", "30",
             "-extfile", str(ext), "-out", str(d / "bmc.pem"))
    os.chmod(d / "bmc.key", 0o600)


# --- one BMC -------------------------------------------------------------------------------

def _sdrs(fans: int, psus: int) -> str:
    out = ["sdr type 18", "  device_slave_address 0x20", "  device_channel_number 0",
           "  chassis true", "  ipmb_event_gen false", "  ipmb_event_recv false",
           "  fru_inventory false", "  sel true", "  sdr true", "  sensor true",
           "  entity_id system_board", "  entity_instance 1",
           '  id_string "nodecert lab BMC"', "endsdr", ""]
    units = {"temperature": ("Temperature", "degrees_C"), "fan": ("Fan", "RPM"),
             "voltage": ("Voltage", "Volts"), "power": ("Other_Units_Based_Sensor", "Watts")}
    names = ("lnc", "lc", "lnr", "unc", "uc", "unr")
    for s in ipmi_sensors(fans):
        stype, unit = units[s.kind]
        lnr, lc, lnc, unc, uc, unr = s.thresholds
        vals = dict(zip(names, (lnc, lc, lnr, unc, uc, unr), strict=True))
        out += ["sdr type 1", "  sensor_owner_id 0x20", "  sensor_owner_lun 0",
                "  channel_number 0", f"  sensor_number {s.number}",
                "  entity_id system_board", "  entity_instance 1",
                f"  sensor_type {stype}", "  init_scanning true", "  init_events true",
                "  init_thresholds true", "  init_sensor_type true",
                "  default_sensor_scan_on true", "  event_reading_type_code 1",
                "  sensor_threshold_access settable",
                *[f"  {k}_thrsh_readable true" for k, v in vals.items() if v is not None],
                "  analog_data_format unsigned", "  rate_unit none", "  modifier_unit none",
                "  percentage false", f"  base_unit {unit}", "  modifier_unit_code unspecified",
                "  linearization linear", f"  m {s.m}", "  tolerance 0", "  b 0",
                "  accuracy 1", "  accuracy_exp 0", "  sensor_direction input",
                f"  r_exp {s.r_exp}", "  b_exp 0", "  sensor_maximum 255",
                "  sensor_minimum 0",
                *[f"  {k}_thresh {round(v / (s.m * 10 ** s.r_exp))}" for k, v in vals.items()
                  if v is not None],
                f'  id_string "{s.name}"', "endsdr", ""]
    for k in range(psus):
        out += ["sdr type 1", "  sensor_owner_id 0x20", "  sensor_owner_lun 0",
                "  channel_number 0", f"  sensor_number {psu_sensor_number(k)}",
                "  entity_id power_supply", f"  entity_instance {k + 1}",
                "  sensor_type Power_Supply", "  init_scanning true", "  init_events true",
                "  init_sensor_type true", "  default_sensor_scan_on true",
                "  event_reading_type_code 0x6f",
                *[f"  event{b}_state_ret true" for b in range(4)],
                *[f"  assert_event{b} true" for b in range(4)],
                "  analog_data_format unsigned", "  base_unit unspecified",
                f'  id_string "PSU{k + 1} Status"', "endsdr", ""]
    return "\n".join(out)


def _bits(which: tuple[int, ...]) -> str:
    return "".join("1" if b in which else "0" for b in range(14, -1, -1))


def _emu(d: Path, fans: int, psus: int, settings: dict[str, Any], faults: dict[str, Any]) -> str:
    major, _, minor = settings["firmware"].partition(".")
    lines = ["mc_setbmc 0x20",
             f"mc_add 0x20 0 no-device-sdrs 0x23 {int(major)} 0x{minor[:2] or '00'} 0x9f "
             "0x1291 0xf02 persist_sdr", "sel_enable 0x20 1000 0x0a"]
    names = ("lnc", "lc", "lnr", "unc", "uc", "unr")
    for s in ipmi_sensors(fans):
        stype = {"temperature": 1, "voltage": 2, "fan": 4, "power": 0x0b}[s.kind]
        f = d / "ipmi" / f"{s.name.replace(' ', '_')}.val"
        lines.append(f'sensor_add 0x20 0 {s.number} {stype} 0x01 poll 1000 file "{f}"')
        lnr, lc, lnc, unc, uc, unr = s.thresholds
        vals = dict(zip(names, (lnc, lc, lnr, unc, uc, unr), strict=True))
        mask = "".join("1" if vals[k] is not None else "0" for k in reversed(names))
        raw = [str(round(vals[k] / (s.m * 10 ** s.r_exp))) if vals[k] is not None else "0"
               for k in reversed(names)]
        lines.append(f"sensor_set_threshold 0x20 0 {s.number} settable {mask} {' '.join(raw)}")
        up, low = (7, 9, 11), (0, 2, 4)
        keys = ("unc", "uc", "unr", "lnc", "lc", "lnr")
        bits = _bits(tuple(b for b, k in zip(up + low, keys, strict=True)
                           if vals[k] is not None))
        lines.append(f"sensor_set_event_support 0x20 0 {s.number} enable scanning per-state "
                     f"{bits} {bits} {bits} {bits}")
    failed = int(faults["psu_failed"].get("psu", 1)) if "psu_failed" in faults else None
    for k in range(psus):
        num = psu_sensor_number(k)
        lines += [f"sensor_add 0x20 0 {num} 0x08 0x6f",
                  f"sensor_set_event_support 0x20 0 {num} enable scanning per-state "
                  f"{_bits((0, 1, 3))} {_bits((0, 1, 3))} {_bits((0, 1, 3))} {_bits((0, 1, 3))}",
                  f"sensor_set_bit 0x20 0 {num} 0 1 0"]
        if failed == k + 1:
            lines += [f"sensor_set_bit 0x20 0 {num} 1 1 0", f"sensor_set_bit 0x20 0 {num} 3 1 0"]
    for e in settings.get("sel_ipmi", []):
        lines.append("sel_add 0x20 2 " + " ".join(f"0x{b:02x}" for b in e))
    lines.append("mc_enable 0x20")
    return "\n".join(lines) + "\n"


def _lan_conf(name: str, ip: str, password: str) -> str:
    return "\n".join([
        f'name "{name}"', "set_working_mc 0x20", "  startlan 1", f"    addr {ip} {IPMI_PORT}",
        "    priv_limit admin", "    allowed_auths_callback none", "    allowed_auths_user md5",
        "    allowed_auths_operator md5", "    allowed_auths_admin md5",
        f"    guid {secrets.token_hex(16)}", "  endlan",
        '  user 1 true "" "" user 10 none',
        f'  user 2 true "{USERNAME}" "{password}" admin 10 md5', ""])


def _sel_critical(text: str, when: float) -> tuple[dict[str, Any], list[int]]:
    """The injected entry as a Redfish LogEntry and as a raw IPMI SEL record (a Memory
    sensor's Uncorrectable ECC assertion, IPMI sensor-specific offset 01h)."""
    entry = {"Id": "1", "Name": "Log Entry 1",
             "Created": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(when)),
             "Severity": "Critical", "Message": text, "SensorType": "Memory",
             "EntryCode": "Assert"}
    # generator 0x20 (the BMC), event message rev 4, sensor type 0Ch (Memory), sensor
    # 60h, sensor-specific assertion (6Fh), offset 01h (Uncorrectable ECC)
    record = [*struct.pack("<I", int(when)), 0x20, 0x00, 0x04, 0x0c, 0x60, 0x6f, 0x01,
              0xff, 0xff]
    return entry, record


def prepare(cfg: LabConfig, n: int, hw_faults: list[Fault], host: str,
            gpu_count: int) -> dict[str, Any]:
    """Write BMC n's files (settings, certificate, IPMI configuration) for its faults."""
    d = bmc_dir(cfg, n)
    (d / "ipmi").mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    ip = str(bmc_ip(cfg, n))
    host_cert(cfg, d, ip)
    mine = {f.kind: f.params for f in hw_faults if f.host in ("*", host)}
    old = json.loads((d / "bmc.json").read_text()) if (d / "bmc.json").is_file() else {}
    settings: dict[str, Any] = {"username": USERNAME, "firmware": GOLDEN_FIRMWARE, "fans": 8,
                                "sel": [], "sel_ipmi": []}
    if "bmc_firmware" in mine:
        settings["firmware"] = str(mine["bmc_firmware"].get("version", "1.17"))
    if "sel_critical_event" in mine:
        # logged once, when the fault is first applied (a later `lab faults` keeps it)
        kept = old.get("sel") or []
        when = time.time() if not kept else time.mktime(
            time.strptime(kept[0]["Created"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        entry, record = _sel_critical(str(mine["sel_critical_event"].get(
            "text", "DIMM_B3: Uncorrectable ECC error")), when)
        settings["sel"], settings["sel_ipmi"] = [entry], [record]
    (d / "bmc.json").write_text(json.dumps(settings, indent=1))
    password = (root(cfg) / "password").read_text().strip()
    if "bmc_bad_credentials" in mine:
        password = "not-" + secrets.token_urlsafe(9)
    fd = os.open(d / "password", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    psus = PSUS.get(gpu_count, (2, 2000))[0]
    fd = os.open(d / "lan.conf", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(_lan_conf(f"bmc{n}", ip, password))
    (d / "bmc.emu").write_text(_emu(d, settings["fans"], psus, settings, mine))
    (d / "bmc.sdrs").write_text(_sdrs(settings["fans"], psus))
    state = d / "ipmistate"
    shutil.rmtree(state, ignore_errors=True)  # a fresh SEL: the model's faults decide it
    (state / "ipmi_sim" / f"bmc{n}").mkdir(parents=True)
    run(["sdrcomp", "-o", str(state / "ipmi_sim" / f"bmc{n}" / "sdr.20.main"),
         str(d / "bmc.sdrs")], timeout=30)
    return {"unreachable": "bmc_unreachable" in mine}


def start(cfg: LabConfig, n: int) -> list[int]:
    """Start BMC n's two processes in the BMC namespace."""
    d, ns = bmc_dir(cfg, n), netns_name(cfg)
    host_dir = cfg.host_dir(n)
    (d / "redfish.ready").unlink(missing_ok=True)
    run([sys.executable, "-m", "nodecert.lab.bmcsim", "--dir", str(d), "--host-dir",
         str(host_dir), "--address", str(bmc_ip(cfg, n)), "--once"], timeout=60)
    pids = []
    for argv, log in (([sys.executable, "-m", "nodecert.lab.bmcsim", "--dir", str(d),
                        "--host-dir", str(host_dir), "--address", str(bmc_ip(cfg, n)),
                        "--port", str(REDFISH_PORT)], "redfish.log"),
                      (["ipmi_sim", "-c", str(d / "lan.conf"), "-f", str(d / "bmc.emu"),
                        "-s", str(d / "ipmistate"), "-n"], "ipmi.log")):
        with (d / log).open("ab") as out:
            p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        pids.append(p.pid)
    (d / "pids.json").write_text(json.dumps(pids))
    return pids


def wait_listening(d: Path, ip: str, port: int, what: str) -> None:
    """Until the Redfish emulator kept in d accepts connections on ip:port; one that never
    does within READY_TIMEOUT_S is an error quoting the end of its log."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            with socket.create_connection((ip, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                log = (d / "redfish.log").read_text()[-500:] if (d / "redfish.log").is_file() \
                    else ""
                raise NodecertError(f"{what} did not answer on {ip}:{port} within "
                                    f"{READY_TIMEOUT_S:g} s: {log}") from None
            time.sleep(0.1)  # the emulator is starting; there is no other readiness signal


def wait_ready(cfg: LabConfig, n: int) -> None:
    """Redfish answering TLS and IPMI's SEL clock set to now (a BMC keeps wall time)."""
    d, ip = bmc_dir(cfg, n), str(bmc_ip(cfg, n))
    wait_listening(d, ip, REDFISH_PORT, f"the lab BMC of h{n}")
    stamp = " ".join(f"0x{b:02x}" for b in struct.pack("<I", int(time.time())))
    env = {"PATH": os.environ.get("PATH", ""), "IPMI_PASSWORD": (d / "password").read_text()
           .strip()}
    for _ in range(int(READY_TIMEOUT_S * 2)):
        p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", ip, "-U", USERNAME, "-E",
                            "-C", "3", "-N", "1", "-R", "1", "raw", "0x0a", "0x49",
                            *stamp.split()], env=env, capture_output=True, text=True,
                           timeout=10, check=False)
        if p.returncode == 0:
            return
        time.sleep(0.5)  # ipmi_sim still starting
    raise NodecertError(f"the lab BMC of h{n} did not answer IPMI on {ip}:623: "
                        f"{p.stderr.strip()[-300:]}")


def stop(cfg: LabConfig, n: int) -> None:
    """Stop BMC n's processes (those it recorded, when they still run its files)."""
    d = bmc_dir(cfg, n)
    try:
        pids = json.loads((d / "pids.json").read_text())
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(d).encode() in cmd:
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        try:
            os.waitpid(pid, 0)  # our own children when this process started them
        except ChildProcessError:
            wait_gone([pid], 5.0)
    (d / "pids.json").unlink(missing_ok=True)


def up(cfg: LabConfig, hosts: list[tuple[int, str, int]], faults: list[Fault]) -> None:
    """Every host's BMC, (re)started for the given faults. hosts: (n, name, gpu_count)."""
    if max((n for n, _, _ in hosts), default=0) > MAX_BMC_HOSTS:
        raise NodecertError(f"the lab gives BMCs to at most {MAX_BMC_HOSTS} hosts",
                            hint="use --bmc with fewer hosts")
    preflight()
    ensure_ca(cfg)
    # The images `nodecert firmware apply --mirror STATE/firmware-mirror` pushes to them.
    write_lab_images(firmware_mirror(cfg))
    ns_up(cfg, [n for n, _, _ in hosts])
    for n, name, gpus in hosts:
        stop(cfg, n)
        if not prepare(cfg, n, faults, name, gpus)["unreachable"]:
            start(cfg, n)
    for n, _, _ in hosts:
        if (bmc_dir(cfg, n) / "pids.json").is_file():
            wait_ready(cfg, n)


__all__ = ["MAX_BMC_HOSTS", "bmc_ip", "down", "ensure_ca", "firmware_mirror", "host_cert",
           "inventory_spec", "present", "up"]
