"""Security defences (docs/security.md): each test fails without its defence."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.env import REPO

# --- no fixed names in shared temp directories ------------------------------------------

SHARED_TMP = re.compile(r"""["'](/tmp|/var/tmp|/dev/shm)/[A-Za-z0-9_.-]+""")
# Fixed names under /var/tmp that are proven ours before use (owner us, no group/other
# write, not a symlink: LabConfig.claim_root): the lab's root, shared by runs for its cache.
ALLOWED = {"/var/tmp/nodecert-lab"}


def test_no_fixed_path_in_a_shared_temp_directory() -> None:
    found = []
    for base in ("src", "validators", "roles", "playbooks"):
        for path in (REPO / base).rglob("*"):
            if not path.is_file() or path.suffix not in (".py", ".j2", ".yml", ".yaml",
                                                         ".sh", ".cfg", ""):
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                for m in SHARED_TMP.finditer(line):
                    name = m.group(0)[1:]
                    if not any(name == a or name.startswith(a + "/") for a in ALLOWED):
                        found.append(f"{path.relative_to(REPO)}:{n}: {name}")
    assert found == []


def test_ansible_local_temp_is_private_and_unpredictable() -> None:
    ini = str(REPO / "inventory/sample/lab.ini")
    code = ("import os, pathlib; from nodecert.inventory.reader import load_inventory; "
            f"load_inventory(pathlib.Path({ini!r})); "
            "print(os.environ['ANSIBLE_LOCAL_TEMP']); print(os.environ['ANSIBLE_CONFIG'])")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=120, check=True).stdout.split("\n")
            for _ in range(2)]
    assert outs[0][0] != outs[1][0]  # a new name per process
    assert "nodecert-ansible-local" not in outs[0][0]
    assert outs[0][1] == str(REPO / "playbooks" / "ansible.cfg")


def test_private_temp_dir_mode(tmp_path: Path) -> None:
    from nodecert.core.ansible_env import ansible_local_temp
    path = Path(ansible_local_temp())
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()


def test_ansible_cfg_in_the_working_directory_is_not_honoured(tmp_path: Path) -> None:
    """A cwd ansible.cfg that disables the INI plugin would make the inventory unreadable
    if Ansible honoured it."""
    (tmp_path / "ansible.cfg").write_text("[inventory]\nenable_plugins = yaml\n"
                                          "[defaults]\nhost_key_checking = False\n")
    ini = str(REPO / "inventory/sample/lab.ini")
    code = ("from nodecert.inventory.reader import load_inventory; import pathlib; "
            f"print(len(load_inventory(pathlib.Path({ini!r}))))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) >= 1


# --- node code: kept only while provably ours ---------------------------------------------

def _install(tmp: Path, base: Path) -> subprocess.CompletedProcess[str]:
    from nodecert.transport.bundle import install_script, node_bundle
    data, sha = node_bundle()
    bundle = tmp / "bundle.tgz"
    bundle.write_bytes(data)
    return subprocess.run(["/bin/sh", "-c", install_script(sha[:16], str(bundle), str(base))],
                          capture_output=True, text=True, timeout=60, check=False)


def test_node_code_is_reinstalled_when_tampered_or_loosened(tmp_path: Path) -> None:
    base = tmp_path / "opt" / "node"
    first = _install(tmp_path, base)
    assert first.returncode == 0 and "installed" in first.stdout, first.stderr
    assert _install(tmp_path, base).stdout.strip() == ""  # intact: kept as is
    code = next(base.glob("*/nodecert_node/runner.py"))
    original = code.read_text()
    code.write_text(original + "\nimport os; os.system('id')\n")  # tampered content
    assert "installed" in _install(tmp_path, base).stdout
    assert code.read_text() == original
    code.chmod(0o666)  # writable by anyone: not trusted any more
    assert "installed" in _install(tmp_path, base).stdout
    assert stat.S_IMODE(code.stat().st_mode) == 0o644


def test_the_read_only_check_says_in_place_exactly_when_the_install_would_do_nothing(
        tmp_path: Path) -> None:
    # The validators role skips the install when this check says "in place": it must
    # judge as the install does, and write nothing.
    from nodecert.transport.bundle import check_script, node_bundle
    sha16 = node_bundle()[1][:16]
    base = tmp_path / "opt" / "node"

    def check() -> str:
        out = subprocess.run(["/bin/sh", "-c", check_script(sha16, str(base))],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert check() == "not in place" and not base.exists()  # nothing installed, nothing made
    _install(tmp_path, base)
    assert check() == "in place"
    code = next(base.glob("*/nodecert_node/runner.py"))
    code.write_text(code.read_text() + "\n# changed\n")
    assert check() == "not in place"
    _install(tmp_path, base)
    assert check() == "in place"
    code.chmod(0o664)
    assert check() == "not in place"
    _install(tmp_path, base)
    (base / "current").unlink()
    assert check() == "not in place"
    _install(tmp_path, base)
    base.chmod(0o777)  # the base now writable by others: the install would refuse
    assert check() == "not in place"
    base.chmod(0o755)


def test_node_code_refused_under_a_directory_others_can_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = _install(tmp_path, shared / "node")
    assert out.returncode == 3 and "refusing" in out.stderr
    assert not (shared / "node" / "current").exists()


# --- storage: scratch only where it is ours; leftovers removed; no raw devices at night ----

def test_scratch_directory_must_be_ours_and_not_a_link(tmp_path: Path) -> None:
    from nodecert_node.checks.storage import scratch_problem
    good = tmp_path / "scratch"
    good.mkdir(mode=0o700)
    assert scratch_problem(str(good)) is None
    link = tmp_path / "link"
    link.symlink_to("/etc")
    assert "is a symlink" in (scratch_problem(str(link)) or "")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    assert "writable by everyone" in (scratch_problem(str(open_dir)) or "")
    open_dir.chmod(0o1777)  # sticky, like /tmp: others cannot swap what we create
    assert scratch_problem(str(open_dir)) is None


def test_a_stopped_storage_check_removes_its_files(tmp_path: Path) -> None:
    from nodecert_node import tools
    work = tmp_path / "nodecert-fio-123"
    work.mkdir()
    (work / "nodecert-fio.dat").write_bytes(b"x" * 4096)
    tools.remove_on_stop(str(work))
    tools.kill_all()  # what the SIGTERM handler of a check does
    assert not work.exists()


def test_runner_removes_a_killed_checks_scratch(tmp_path: Path) -> None:
    from nodecert_node import runner
    from nodecert_node.contract import Plan
    from support.simnode import SimNode
    plan = Plan.from_dict(SimNode(tmp_path).plan(["storage.fio"], scratch=str(tmp_path)))
    left = tmp_path / "nodecert-fio-4242"
    left.mkdir()
    (left / "nodecert-fio.dat").write_bytes(b"x")
    runner._remove_leftovers(plan, 4242)
    assert not left.exists()


def test_scheduled_plan_never_keeps_raw_devices() -> None:
    from nodecert_node.state import for_schedule
    plan = {"suite": "quick", "options": {"storage": {
        "targets": ["/dev/nvme1n1", "/var/lib/nodecert/scratch"],
        "allow_raw_devices": ["/dev/nvme1n1"]}}}
    kept = for_schedule(plan)["options"]["storage"]
    assert kept == {"targets": ["/var/lib/nodecert/scratch"], "allow_raw_devices": []}
    assert plan["options"]["storage"]["allow_raw_devices"] == ["/dev/nvme1n1"]  # untouched


# --- node text in the certificate's page: no live markup --------------------------------

HOSTILE = 'bf16" onload="document.body.setAttribute(\'data-pwned\',\'1\')" x="'


def hostile_page(tmp_path: Path) -> Path:
    import datetime as dt

    from nodecert.certs.certify import certify
    from nodecert.certs.signing import init_key, load_private_key
    from support.runs import make_run, passing, recorded_results
    results = passing(recorded_results())
    burn = next(r for r in results if r["check"] == "load.burnin")
    burn["value"]["dtype"] = HOSTILE
    burn["summary"] = 'GPU0 <img src=x onerror="document.title=\'pwned\'"> \x1b[32mREADY'
    run = make_run(tmp_path, {"n1": {"results": results}})
    key = load_private_key(init_key(tmp_path / "k").private)
    cr = certify(run, key, now=dt.datetime.now(dt.UTC))
    return cr.nodes[0].html


def test_svg_labels_escape_quotes_and_enumerations_are_checked(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from nodecert.certs import svgplot
    svg = svgplot.bar_chart(f"Sustained {HOSTILE} GEMM", [(HOSTILE, 1.0)], ylabel='"y"')
    root = ET.fromstring(svg)  # well-formed: no attribute was broken out of
    assert all(not k.startswith("on") for el in root.iter() for k in el.attrib)
    html = hostile_page(tmp_path).read_text()
    assert 'onload="document' not in html and "<img src=x" not in html
    assert "\x1b" not in html and "unknown dtype" in html


@pytest.mark.lab  # root: the browser runs in its own network namespace (unshare --net)
def test_hostile_node_text_runs_no_script_in_a_browser(tmp_path: Path) -> None:
    from support.browser import headless
    from support.env import require_root
    require_root()
    page = hostile_page(tmp_path)
    dom = headless(page.as_uri(), "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the text may be shown (escaped); the script must not have run
    assert not re.search(r"<body[^>]*data-pwned", dom.stdout)
    assert "<title>pwned" not in dom.stdout
    assert 'data-plot="burnin-tflops"' in dom.stdout  # the plot itself still renders


# --- host names become paths, links and labels: only safe ones --------------------------

SPEC = ("nodecert_gpu_model=H200-SXM nodecert_gpu_count=8 nodecert_cpu_cores=112 "
        "nodecert_ram_gb=2048 nodecert_nvme_count=8")


@pytest.mark.parametrize(("host", "extra", "why"), [
    ("../../x", "", "host name '../../x' is not a safe name"),
    ("node..up", "", "is not a safe name"),
    ("gpu-01", "ansible_python_interpreter='python3; touch /tmp/pwned'",
     "is not a path or command name"),
])
def test_unsafe_host_names_and_interpreters_are_refused(tmp_path: Path, host: str, extra: str,
                                                        why: str) -> None:
    from nodecert.inventory.reader import check_inventory
    ini = tmp_path / "inv.ini"
    ini.write_text(f"[g]\n{host} ansible_host=192.0.2.10 {SPEC} {extra}\n")
    report = check_inventory(ini)
    assert any(why in p.what for p in report.problems), [p.what for p in report.problems]
    assert not report.ok  # load_inventory refuses the whole inventory


def test_javascript_host_name_in_yaml_is_refused(tmp_path: Path) -> None:
    from nodecert.inventory.reader import check_inventory
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    'javascript:alert(1)':\n      ansible_host: 192.0.2.10\n"
                   + "".join(f"      {kv.split('=')[0]}: {kv.split('=')[1]}\n"
                             for kv in SPEC.split()))
    report = check_inventory(inv)
    assert any("is not a safe name" in p.what for p in report.problems)
    assert not report.hosts


def test_interpreter_is_quoted_for_the_remote_shell() -> None:
    src = (REPO / "src" / "nodecert" / "validation" / "session.py").read_text()
    assert "shlex.quote(self.endpoint(hr).python)" in src
    assert "start(client, self.endpoint(hr)" in src


# --- untrusted envelopes: a clean exit 2, never a traceback ------------------------------

@pytest.mark.parametrize(("content", "why"), [
    (b'{"payload": "' + b"\\ud800" + b'"}', "surrogate"),
    (b"[" * 5000 + b"]" * 5000, "nested"),
    (b'{"payloadType": NaN}', "NaN is not allowed"),
    (b"\xff\xfe{}", "not JSON"),
])
def test_hostile_envelopes_exit_2(tmp_path: Path, content: bytes, why: str) -> None:
    from click.testing import CliRunner

    from nodecert.certs.signing import init_key
    from nodecert.cli import main
    kp = init_key(tmp_path / "k")
    env = tmp_path / "env.json"
    env.write_bytes(content)
    r = CliRunner().invoke(main, ["verify", str(env), "--pubkey", str(kp.public)])
    assert r.exit_code == 2 and why in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_oversized_envelope_is_refused_without_reading_it_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.certs import verify
    from nodecert.certs.signing import init_key
    monkeypatch.setattr(verify, "MAX_ENVELOPE", 1024)
    env = tmp_path / "big.json"
    env.write_bytes(b'{"x": "' + b"a" * 4096 + b'"}')
    with pytest.raises(verify.ReportError, match="larger than"):
        verify.verify_report(env, [init_key(tmp_path / "k").public])


def test_url_safe_base64_envelope_verifies(tmp_path: Path) -> None:
    import base64
    import json

    from nodecert.certs.signing import (
        init_key,
        load_private_key,
        load_public_key,
        sign_envelope,
        verify_envelope,
    )
    kp = init_key(tmp_path / "k")
    payload = b'{"x": "\xff\xfe?>>"}'  # bytes whose standard base64 holds + and /
    env = sign_envelope(payload, "application/vnd.in-toto+json", load_private_key(kp.private))
    url = dict(env, payload=base64.urlsafe_b64encode(payload).decode().rstrip("="),
               signatures=[dict(env["signatures"][0], sig=base64.urlsafe_b64encode(
                   base64.b64decode(env["signatures"][0]["sig"])).decode())])
    assert json.dumps(url) != json.dumps(env)
    assert verify_envelope(url, [load_public_key(kp.public)])[1] == payload


# --- secrets never land in a run, a log or a certificate ---------------------------------

CANARY = "CANARY-9f2c1e77-not-a-real-password"


@pytest.mark.parametrize("var", ["ansible_become_password", "ansible_password",
                                 "ansible_ssh_pass", "mirror_token"])
def test_inline_secret_is_refused_and_never_shown(tmp_path: Path, var: str) -> None:
    from click.testing import CliRunner

    from nodecert.cli import main
    ini = tmp_path / "inv.ini"
    ini.write_text(f"[g]\ngpu-01 ansible_host=192.0.2.10 {SPEC} {var}={CANARY}\n")
    runs = tmp_path / "runs"
    for args in (["inventory", "check", "-i", str(ini)],
                 ["validate", "-i", str(ini), "--runs-dir", str(runs)],
                 ["provision", "--inventory", str(ini), "--stack", "r580-cuda13.0",
                  "--runs-dir", str(runs)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert f"{var} is set in plain text" in r.output and CANARY not in r.output
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != ini]
    assert not any(CANARY in p.read_text(errors="replace") for p in written)


def test_mirror_credentials_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from nodecert.cli import main
    runs = tmp_path / "runs"
    r = CliRunner().invoke(main, [
        "provision", "--inventory", str(REPO / "inventory/sample/lab.ini"), "--stack",
        "r580-cuda13.0", "--mirror", f"https://user:{CANARY}@mirror.example/", "--runs-dir",
        str(runs)])
    assert r.exit_code == 2 and "carries credentials" in r.output
    assert not runs.exists()


# --- host keys are checked whatever an inventory says -----------------------------------

@pytest.mark.parametrize(("extra", "refused"), [
    ("ansible_ssh_common_args='-o StrictHostKeyChecking=no'", True),
    ("ansible_ssh_extra_args='-o UserKnownHostsFile=/dev/null'", True),
    ("ansible_ssh_args='-o StrictHostKeyChecking=accept-new'", True),
    ("ansible_ssh_common_args='-o StrictHostKeyChecking=false'", True),
    ("ansible_ssh_common_args='-o StrictHostKeyChecking ask'", True),
    ("ansible_ssh_common_args='-oStrictHostKeyChecking=No'", True),
    ("ansible_ssh_common_args='-o \"StrictHostKeyChecking=yesno\"'", True),
    ("ansible_host_key_checking=false", True),
    ("ansible_ssh_common_args='-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes'", False),
    ("ansible_ssh_common_args='-o StrictHostKeyChecking=True'", False),
    ("ansible_ssh_common_args='-o StrictHostKeyChecking yes'", False),
])
def test_inventory_that_turns_host_key_checking_off_is_refused(tmp_path: Path, extra: str,
                                                               refused: bool) -> None:
    from nodecert.inventory.reader import check_inventory
    ini = tmp_path / "inv.ini"
    ini.write_text(f"[g]\ngpu-01 ansible_host=192.0.2.10 {SPEC} {extra}\n")
    report = check_inventory(ini)
    assert report.ok is not refused, [p.what for p in report.problems]
    assert any("host key checking off" in p.what or "is false" in p.what
               for p in report.problems) is refused


def test_provisioning_puts_strict_host_key_checking_first() -> None:
    from nodecert.provision.run import SSH_ARGS
    assert SSH_ARGS.startswith("-o StrictHostKeyChecking=yes")
    src = (REPO / "src/nodecert/provision/run.py").read_text()
    assert '"ANSIBLE_SSH_ARGS": SSH_ARGS' in src


# --- the repository key file holds exactly the pinned key --------------------------------

FPR = "EB693B3035CD5710E231E123A4B469963BF863CC"
ONE_KEY = (f"pub:-:4096:1:A4B469963BF863CC:1650000000:::-:::scESC::::::23::0:\n"
           f"fpr:::::::::{FPR}:\n"
           "uid:-::::1650000000::X::cudatools <cudatools@nvidia.com>::::::::::0:\n"
           "sub:-:4096:1:1111111111111111:1650000000::::::e::::::23:\n"
           "fpr:::::::::1111111111111111111111111111111111111111:\n")
ROGUE = ("pub:-:4096:1:2222222222222222:1700000000:::-:::scESC::::::23::0:\n"
         "fpr:::::::::2222222222222222222222222222222222222222:\n")


@pytest.mark.parametrize(("stdout", "fails"), [
    (ONE_KEY, False),
    (ONE_KEY + ROGUE, True),          # the pinned key plus another: apt would trust both
    (ROGUE + ONE_KEY, True),
    (ROGUE, True),
    (ONE_KEY.replace(f"fpr:::::::::{FPR}:\n", "") + f"fpr:::::::::{FPR}:\n", True),  # subkey
])
def test_repository_key_check(stdout: str, fails: bool) -> None:
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    tasks = yaml.safe_load((REPO / "roles/nvidia_repo/tasks/repository.yml").read_text())
    flat = [t for top in tasks for t in [top, *top.get("block", [])]]
    task = next(t for t in flat if t.get("register") == "nvidia_repo_key_show")
    templar = Templar(loader=DataLoader(), variables={
        "nvidia_repo_key_show": {"rc": 0, "stdout": stdout,
                                 "stdout_lines": stdout.splitlines()},
        "nvidia_repo_effective_fingerprint": FPR})
    got = templar.template(trust_as_template(
        "{{ (" + " ".join(task["failed_when"].split()) + ") | bool }}"))
    assert got is fails


# --- the node's scheduled unit runs sandboxed ---------------------------------------------

def test_revalidate_unit_is_sandboxed_without_hiding_the_gpus() -> None:
    unit = (REPO / "roles/validators/templates/nodecert-revalidate.service.j2").read_text()
    directives = dict(line.split("=", 1) for line in unit.splitlines()
                      if "=" in line and not line.startswith("#"))
    for key, value in (("NoNewPrivileges", "yes"), ("PrivateTmp", "yes"),
                       ("ProtectSystem", "full"), ("RestrictSUIDSGID", "yes"),
                       ("UMask", "0077")):
        assert directives.get(key) == value, key
    # what would break the checks: no device policy (GPUs), no hidden kernel log
    for key in ("PrivateDevices", "DevicePolicy", "ProtectKernelLogs", "ProtectClock"):
        assert key not in directives, key


def test_lab_root_at_a_fixed_name_is_used_only_when_ours(tmp_path: Path) -> None:
    from nodecert.core.errors import NodecertError
    from nodecert.lab.config import LabConfig
    fresh = LabConfig(root=tmp_path / "lab")
    assert fresh.claim_root().is_dir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "lab")
    with pytest.raises(NodecertError, match="not a directory"):
        LabConfig(root=link).claim_root()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(NodecertError, match="others may write"):
        LabConfig(root=shared).claim_root()


def test_labs_claiming_a_new_root_at_the_same_moment_all_get_it(tmp_path: Path) -> None:
    """Three labs coming up at once on a fresh machine: each sees no root, one makes it,
    the others' mkdir finds it made; every one of them claims it (each checks it as any)."""
    import threading

    from nodecert.lab.config import LabConfig
    root = tmp_path / "lab"
    start = threading.Barrier(3)
    got: list[object] = []

    def claim() -> None:
        start.wait()
        try:
            got.append(LabConfig(root=root).claim_root())
        except Exception as exc:  # what the race raised is the finding
            got.append(exc)
    # The window between "no root" and mkdir, held open for all three.
    real_lexists = os.path.lexists
    seen = threading.Barrier(3)

    def lexists(p: object) -> bool:
        there = real_lexists(p)  # type: ignore[arg-type]
        if p == root:
            seen.wait()
        return there
    import unittest.mock
    with unittest.mock.patch("nodecert.lab.config.os.path.lexists", lexists):
        threads = [threading.Thread(target=claim) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert got == [root, root, root]


def test_a_second_lab_gets_names_of_its_own(tmp_path: Path) -> None:
    """NODECERT_LAB_DIR or NODECERT_LAB_SUBNET gives a lab its own bridge, namespace,
    veth and machine names and its own state, so it never meets the standard lab's."""
    import ipaddress

    from nodecert.lab import stop
    from nodecert.lab.config import LabConfig
    standard = LabConfig(root=Path("/var/tmp/nodecert-lab"),
                         subnet=ipaddress.IPv4Network("10.78.0.0/24"))
    assert (standard.prefix, standard.bridge, standard.state_name) == ("nclab", "nclab0",
                                                                         "state")
    elsewhere = LabConfig(root=tmp_path / "lab", subnet=standard.subnet)
    other_net = LabConfig(root=standard.root, subnet=ipaddress.IPv4Network("10.78.9.0/24"))
    names = {(c.prefix, c.bridge, c.netns(1), c.veth(1), c.alias)
             for c in (standard, elsewhere, other_net)}
    assert len({n for name in names for n in name}) == 15  # nothing shared
    assert standard.state not in (other_net.state, elsewhere.state)
    assert all(len(c.veth(200)) <= 15 and len(c.bridge) <= 15
               for c in (standard, elsewhere, other_net))  # the kernel's limit
    # the same settings give the same names (a later `down` finds what `up` made)
    assert LabConfig(root=tmp_path / "lab", subnet=standard.subnet) == elsewhere
    # a recorded PID is never signalled unless it is still that host's boot loop
    assert not stop.ours(elsewhere, os.getpid(), elsewhere.netns(1))
    assert not stop.ours(elsewhere, None, elsewhere.netns(1))


def test_two_labs_build_what_they_share_one_at_a_time(tmp_path: Path) -> None:
    """Two labs on one machine share the base and mirror: while one builds them the
    other waits for it, and past its wait says which lock it waited on (no half-built
    tree is ever read)."""
    import threading

    from nodecert.core.errors import NodecertError
    from nodecert.lab.config import LabConfig
    one, two = LabConfig(root=tmp_path / "lab"), LabConfig(root=tmp_path / "lab",
                                                          state_name="state-b")
    order: list[str] = []
    with one.shared_build():
        with (pytest.raises(NodecertError, match="another lab on this machine has been "
                                                 "building") as e,
              two.shared_build(wait_s=0.3)):
            order.append("two inside while one held the lock")
        assert "lab up" in str(e.value.hint)

        def second() -> None:
            with two.shared_build(wait_s=30):
                order.append("two")
        t = threading.Thread(target=second)
        t.start()
        t.join(1.5)
        order.append("one done")
    t.join(30)
    assert order == ["one done", "two"]
    assert (tmp_path / "lab/.build.lock").stat().st_mode & 0o777 == 0o600


@pytest.mark.lab
def test_provisioning_a_host_with_an_unknown_key_fails(lab: object, tmp_path: Path) -> None:
    """An inventory whose known_hosts lacks the host (and asks nothing weaker): Ansible
    refuses the connection; nothing is provisioned -- even right after another run
    reached the host (each run's SSH masters are its own: no ControlPersist reuse)."""
    from nodecert.provision.run import ProvisionRequest, provision
    st = lab.cfg.state  # type: ignore[attr-defined]
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inv = tmp_path / "inventory.ini"
    inv.write_text((st / "inventory.ini").read_text().replace(
        f"UserKnownHostsFile={st / 'known_hosts'}", f"UserKnownHostsFile={empty}"))
    (tmp_path / "group_vars").mkdir()
    first = provision(ProvisionRequest(st / "inventory.ini", stack="r580-cuda13.0", limit=("h2",),
                      tags=("preflight",), runs_dir=tmp_path / "runs0"),
                      progress=lambda line: None)
    assert first.hosts["h2"].status == "provisioned", first.hosts["h2"].as_dict()
    report = provision(ProvisionRequest(inv, stack="r580-cuda13.0", limit=("h2",),
                       tags=("preflight",), runs_dir=tmp_path / "runs"),
                       progress=lambda line: None)
    outcome = report.hosts["h2"]
    assert outcome.status == "unreachable", outcome.as_dict()
    assert "Host key verification failed" in (outcome.first_error or ""), outcome.as_dict()
