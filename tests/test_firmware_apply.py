"""`nodecert firmware plan/apply` against lab BMC emulators on loopback (Redfish over
HTTPS, multipart push, tasks): a component behind is updated and followed to Completed,
the host then at its recipe; a stuck task, a BMC answering 503, an image whose digest
does not match and a downgrade each end that host with the reason (the BMC's words where
it said any), never the others; every step is recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sushy  # type: ignore[import-untyped]
from click.testing import CliRunner
from sushy.resources.constants import ResetType  # type: ignore[import-untyped]

from nodecert.cli import main
from nodecert.core.errors import InventoryError
from nodecert.firmware.apply import FirmwareRequest, run_firmware
from nodecert.firmware.images import load_manifest
from nodecert.firmware.plan import order, plan_host
from nodecert.firmware.redfishops import multipart
from nodecert.lab.bmcupdate import Updates, lab_image, lab_image_pins, write_lab_images
from nodecert.lab.hardware import Fault
from nodecert.stack.firmware import find_recipe
from support.labbmc import PASSWORD, Bmc
from support.orders import h200_host

pytestmark = pytest.mark.integration
RECIPE = "dgx-h200-motherboard"


@pytest.fixture
def bmcs(tmp_path: Path) -> Iterator[list[Bmc]]:
    out = [Bmc(tmp_path / f"b{n}") for n in range(2)]
    try:
        yield out
    finally:
        for b in out:
            b.proc.terminate()
            b.proc.wait(timeout=10)


def inventory(tmp_path: Path, bmcs: list[Bmc], extra: str = "") -> Path:
    lines = ["[gpu]"]
    for n, b in enumerate(bmcs, 1):
        pw = tmp_path / f"pw{n}"
        pw.write_text(PASSWORD + "\n")
        pw.chmod(0o600)
        spec = {"address": "127.0.0.1", "port": b.port, "protocol": "redfish",
                "ca_file": str(b.cfg.state / "bmc" / "ca.pem"), "username": "nodecert",
                "password_file": str(pw), "timeout_s": 5}
        lines.append(h200_host(f"h{n}", f"192.0.2.{n}", "nodecert_nvme_min_gb=3500",
                               f"nodecert_firmware_recipe={RECIPE}",
                               f"nodecert_bmc='{json.dumps(spec)}'")
                     + ("" if "nodecert_firmware_images" in extra else
                        f" nodecert_firmware_images='{json.dumps(lab_image_pins(RECIPE))}'")
                     + extra)
    path = tmp_path / "inv.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    write_lab_images(tmp_path / "mirror")
    return tmp_path / "mirror"


def req(inv: Path, **kw: Any) -> FirmwareRequest:
    return FirmwareRequest(inv, poll_s=0.2, task_timeout_s=kw.pop("task_timeout_s", 20),
                           runs_dir=inv.parent / "runs", **kw)


def test_plan_names_what_is_behind_and_changes_nothing(bmcs: list[Bmc], tmp_path: Path) -> None:
    bmcs[1].set_faults([Fault("h1", "firmware_old", {"component": "cpld_mid",
                                                     "version": "0.2.0.5"})])
    run = run_firmware(req(inventory(tmp_path, bmcs)))  # (faults named for the emulator's h1)
    assert run.hosts["h1"].status == "at-recipe" and run.hosts["h2"].status == "behind"
    step = next(s for s in run.hosts["h2"].steps if s.component == "cpld_mid")
    assert (step.current, step.wanted, step.action) == ("0.2.0.5", "0.2.0.7", "update")
    assert step.member == "/redfish/v1/UpdateService/FirmwareInventory/CPLDMID_0"
    assert run.run_dir is None and not run.ok
    r = CliRunner().invoke(main, ["firmware", "plan", "-i", str(tmp_path / "inv.ini")])
    assert r.exit_code == 1 and "0.2.0.5" in r.output and "update" in r.output


def test_apply_brings_a_component_to_the_recipe_through_the_bmc(
        bmcs: list[Bmc], tmp_path: Path, mirror: Path) -> None:
    bmcs[0].set_faults([Fault("h1", "firmware_old", {"component": "cpld_mid",
                                                     "version": "0.2.0.5"}),
                        Fault("h1", "firmware_old", {"component": "erot_bmc",
                                                     "version": "00.04.0011.0000_n00"})])
    inv = inventory(tmp_path, bmcs)
    lines: list[str] = []
    run = run_firmware(req(inv, mirror=mirror), progress=lines.append)
    h1 = run.hosts["h1"]
    assert h1.status == "updated", h1.as_dict()
    assert run.hosts["h2"].status == "at-recipe" and run.ok
    assert h1.after is not None and h1.after["verdict"] == "PASS"
    tasks = [e for e in h1.log if e["what"] == "task"]
    assert {e["state"] for e in tasks} >= {"Running", "Completed"}
    assert any("cpld_mid: 0.2.0.5 -> 0.2.0.7 (dgx-h200-motherboard/cpld_mid-0.2.0.7.fwpkg)"
               in line for line in lines)
    recorded = json.loads((run.run_dir / "h1.json").read_text())  # type: ignore[operator]
    pushes = [e for e in recorded["log"] if e["what"] == "push"]
    assert len(pushes) == 2 and all(len(e["sha256"]) == 64 for e in pushes)
    assert PASSWORD not in (run.run_dir / "firmware.json").read_text()  # type: ignore[operator]
    # the host is at its recipe now: plan agrees, and nothing is pushed again
    assert run_firmware(req(inv)).hosts["h1"].status == "at-recipe"
    again = run_firmware(req(inv, mirror=mirror))
    assert again.hosts["h1"].status == "at-recipe"
    assert not [e for e in again.hosts["h1"].log if e["what"] == "push"]


@pytest.mark.parametrize(("fault", "words"), [
    (Fault("h1", "fw_task_stuck", {"percent": 40}), "was still Running at 40% after 5 s"),
    (Fault("h1", "fw_busy", {}), "HTTP 503 3 times in a row while the update ran: the BMC "
                                 "is busy applying firmware; retry later"),
])
def test_a_stuck_or_busy_task_is_that_hosts_error_with_the_bmcs_words(
        bmcs: list[Bmc], tmp_path: Path, mirror: Path, fault: Fault, words: str) -> None:
    old = Fault("h1", "firmware_old", {"component": "cpld_mb", "version": "0.2.1.2"})
    bmcs[0].set_faults([old, fault])
    # (each emulator plays one host's description, its faults named for h1)
    bmcs[1].set_faults([Fault("h1", "firmware_old", {"component": "cpld_mb",
                                                     "version": "0.2.1.2"})])
    run = run_firmware(req(inventory(tmp_path, bmcs), mirror=mirror, task_timeout_s=5))
    h1 = run.hosts["h1"]
    assert h1.status == "failed" and words in h1.error, h1.error
    assert h1.error.startswith("cpld_mb: task /redfish/v1/TaskService/Tasks/1 ended ")
    assert run.hosts["h2"].status == "updated"  # the other host goes on
    assert not run.ok


def test_an_update_the_bmc_calls_done_but_did_not_apply_fails_that_host(
        bmcs: list[Bmc], tmp_path: Path, mirror: Path) -> None:
    """The task reaches Completed, the inventory keeps the old version: the host fails,
    naming the component, the member and the version it still reports; the recipe judged
    after the run FAILs, so no certificate can call it at its recipe."""
    old = Fault("h1", "firmware_old", {"component": "cpld_mb", "version": "0.2.1.2"})
    bmcs[0].set_faults([old, Fault("h1", "fw_not_applied", {})])
    bmcs[1].set_faults([old])
    run = run_firmware(req(inventory(tmp_path, bmcs), mirror=mirror))
    h1 = run.hosts["h1"]
    assert h1.status == "failed", h1.as_dict()
    assert "cpld_mb: task /redfish/v1/TaskService/Tasks/1 Completed, but " in h1.error
    assert "still reports 0.2.1.2, not 0.2.1.6: the update was not applied" in h1.error
    assert h1.after is not None and h1.after["verdict"] == "FAIL"
    assert any(e["what"] == "task" and e["state"] == "Completed" for e in h1.log)
    assert run.hosts["h2"].status == "updated" and not run.ok


def test_an_image_whose_digest_does_not_match_is_never_pushed(
        bmcs: list[Bmc], tmp_path: Path, mirror: Path) -> None:
    bmcs[0].set_faults([Fault("h1", "firmware_old", {"component": "cpld_mb",
                                                     "version": "0.2.1.2"})])
    img = next(i for i in load_manifest(mirror) if i.component == "cpld_mb")
    data = bytearray(img.path(mirror).read_bytes())
    data[-1] ^= 0xFF  # one bit off
    img.path(mirror).write_bytes(bytes(data))
    run = run_firmware(req(inventory(tmp_path, bmcs), mirror=mirror))
    h1 = run.hosts["h1"]
    assert h1.status == "failed" and f"the manifest says {img.sha256}: not pushed" in h1.error
    assert not [e for e in h1.log if e["what"] == "push"]


def test_an_image_only_the_mirror_vouches_for_is_never_pushed(
        bmcs: list[Bmc], tmp_path: Path, mirror: Path) -> None:
    """A doctored mirror: other bytes with their own digest in its (unsigned) manifest.
    Before, they were pushed to the BMC; now only an image whose digest the site (or the
    recipe) pinned is, and a component with no pin is refused."""
    import hashlib

    from nodecert.firmware.images import write_manifest
    bmcs[0].set_faults([Fault("h1", "firmware_old", {"component": "cpld_mb",
                                                     "version": "0.2.1.2"})])
    images = load_manifest(mirror)
    img = next(i for i in images if i.component == "cpld_mb" and i.recipe == RECIPE)
    evil = lab_image("cpld_mb", img.version, b"\x66" * 4096)
    img.path(mirror).write_bytes(evil)
    doctored = [i if i is not img else type(img)(
        img.file, hashlib.sha256(evil).hexdigest(), len(evil), img.component, img.version,
        img.recipe) for i in images]
    write_manifest(mirror, doctored)
    run = run_firmware(req(inventory(tmp_path, bmcs), mirror=mirror))
    h1 = run.hosts["h1"]
    assert h1.status == "failed" and "the pinned digest is" in h1.error, h1.error
    assert not [e for e in h1.log if e["what"] == "push"]
    unpinned = inventory(tmp_path, bmcs, extra=" nodecert_firmware_images='{}'")
    run = run_firmware(req(unpinned, mirror=mirror))
    assert "no image digest is pinned for cpld_mb" in run.hosts["h1"].error
    assert not [e for e in run.hosts["h1"].log if e["what"] == "push"]


def test_a_downgrade_is_made_only_when_asked(bmcs: list[Bmc], tmp_path: Path,
                                            mirror: Path) -> None:
    bmcs[0].set_faults([Fault("h1", "firmware_old", {"component": "cpld_mb",
                                                     "version": "0.2.1.9"})])
    inv = inventory(tmp_path, bmcs)
    run = run_firmware(req(inv, mirror=mirror, limit=("h1",)))
    h1 = run.hosts["h1"]
    assert h1.status == "behind" and "cpld_mb: 0.2.1.9, wanted 0.2.1.6 (a downgrade: not " \
                                      "made)" in h1.error
    assert any(e["what"] == "refused" for e in h1.log)
    forced = run_firmware(req(inv, mirror=mirror, limit=("h1",), allow_downgrade=True))
    assert forced.hosts["h1"].status == "updated", forced.hosts["h1"].error
    push = next(e for e in forced.hosts["h1"].log if e["what"] == "push")
    assert push["force"] is True


def test_the_bmc_refuses_an_older_image_without_force_and_a_foreign_one(tmp_path: Path) -> None:
    """The emulator's own checks, as a real BMC makes them."""
    hw = {"profile": {"gpu_count": 8}, "faults": []}
    members = {"CPLDMB_0": {"name": "cpld_mb", "version": "0.2.1.6"}}
    up = Updates(tmp_path, lambda: hw, lambda: members)
    member = "/redfish/v1/UpdateService/FirmwareInventory/CPLDMB_0"

    def push(component: str, version: str, force: bool = False) -> dict[str, Any]:
        body, ctype = multipart({"Targets": [member], "ForceUpdate": force},
                                lab_image(component, version, b"x" * 64), "f.fwpkg")
        status, doc = up.push(ctype, body)
        assert status == 202
        return doc

    older = push("cpld_mb", "0.2.1.2")
    assert older["TaskState"] == "Exception"
    assert "a downgrade needs ForceUpdate" in older["Messages"][0]["Message"]
    assert push("cpld_mb", "0.2.1.2", force=True)["TaskState"] == "Running"
    foreign = push("cpld_mid", "0.2.0.7")
    assert "the image is for cpld_mid, not for cpld_mb" in foreign["Messages"][0]["Message"]
    body, ctype = multipart({"Targets": [member]}, b"garbage", "f.fwpkg")
    assert up.push(ctype, body)[1]["TaskState"] == "Exception"
    status, doc = up.push("multipart/form-data; boundary=x", b"--x--")
    assert status == 400 and "UpdateParameters and UpdateFile" in doc["error"]["message"]


def test_bad_input_is_refused_before_any_connection(tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text(f"[gpu]\n{h200_host('h1', '192.0.2.1', 'nodecert_nvme_min_gb=3500')}\n")
    with pytest.raises(InventoryError, match="needs nodecert_firmware_recipe and nodecert_bmc"):
        run_firmware(FirmwareRequest(inv))
    r = CliRunner().invoke(main, ["firmware", "plan", "-i", str(inv)])
    assert r.exit_code == 2 and "nodecert_firmware_recipe" in r.output


@pytest.mark.parametrize(("a", "b", "want"), [
    ("0.2.0.5", "0.2.0.7", -1), ("00.04.0018.0000_n00", "00.04.0011.0000_n00", 1),
    ("0.22", "0.22", 0), ("25.06-A", "25.08-9", None), ("2.55", "U46 v1.56", None),
])
def test_version_order(a: str, b: str, want: int | None) -> None:
    assert order(a, b) == want


def test_plan_of_members_is_pure() -> None:
    recipe = find_recipe(RECIPE)
    members = [{"id": "CPLDMB_0", "version": "0.2.1.6", "odata_id": "/m/CPLDMB_0"},
               {"id": "CPLDMID_0", "version": "weird", "odata_id": "/m/CPLDMID_0"}]
    got = {s.component: s.action for s in plan_host(recipe, members)}
    assert got == {"cpld_mb": "current", "cpld_mid": "unordered", "erot_bios": "unknown",
                   "erot_bmc": "unknown"}
    # an older backup bank beside the current image is never planned for (no downgrade,
    # no update of what does not run)
    spare = [*members, {"id": "CPLDMB_1", "version": "0.2.1.2", "odata_id": "/m/CPLDMB_1",
                        "standby": True}]
    steps = [s for s in plan_host(recipe, spare) if s.component == "cpld_mb"]
    assert [(s.member, s.action) for s in steps] == [("/m/CPLDMB_0", "current")]


def test_a_stop_ends_the_run_without_new_pushes(bmcs: list[Bmc], tmp_path: Path,
                                                mirror: Path) -> None:
    bmcs[0].set_faults([Fault("h1", "firmware_old", {"component": "cpld_mb",
                                                     "version": "0.2.1.2"})])
    stop = threading.Event()
    stop.set()
    run = run_firmware(req(inventory(tmp_path, bmcs), mirror=mirror), stop=stop)
    assert run.hosts["h1"].status == "failed" and "stopped" in run.hosts["h1"].error
    assert not [e for e in run.hosts["h1"].log if e["what"] == "push"]


def test_bios_attributes_are_written_pending_applied_by_a_reset_and_verified(
        bmcs: list[Bmc], tmp_path: Path, mirror: Path) -> None:
    bmcs[0].set_faults([Fault("h1", "bios_attr", {"attribute": "SysProfile",
                                                  "value": "PerfPerWattOptimizedDapc"}),
                        Fault("h1", "bios_attr", {"attribute": "SubNumaCluster",
                                                  "value": "2-Way"})])
    inv = inventory(tmp_path, bmcs, " nodecert_bios_profile=dell-poweredge-gpu")
    plan = run_firmware(req(inv, limit=("h1",)))
    sets = {s.component: (s.current, s.wanted) for s in plan.hosts["h1"].steps
            if s.action == "set"}
    assert sets == {"BIOS SysProfile": ("PerfPerWattOptimizedDapc", "PerfOptimized"),
                    "BIOS SubNumaCluster": ("2-Way", "Disabled")}
    assert plan.hosts["h1"].status == "behind"
    # without --bios the firmware is brought to the recipe and the BIOS left as it is
    fw_only = run_firmware(req(inv, mirror=mirror, limit=("h1",)))
    assert fw_only.hosts["h1"].status == "at-recipe"
    assert not [e for e in fw_only.hosts["h1"].log if e["what"] == "bios set"]
    done = run_firmware(req(inv, mirror=mirror, limit=("h1",), bios=True))
    h1 = done.hosts["h1"]
    assert h1.status == "at-recipe", h1.as_dict()
    what = [e["what"] for e in h1.log]
    assert what.index("bios set") < what.index("reset") < what.index("bios")
    assert next(e for e in h1.log if e["what"] == "bios set")["attributes"] == {
        "SysProfile": "PerfOptimized", "SubNumaCluster": "Disabled"}
    assert run_firmware(req(inv, limit=("h1",))).hosts["h1"].status == "at-recipe"


def test_bios_needs_a_profile(bmcs: list[Bmc], tmp_path: Path, mirror: Path) -> None:
    with pytest.raises(InventoryError, match="--bios needs nodecert_bios_profile"):
        run_firmware(req(inventory(tmp_path, bmcs), mirror=mirror, bios=True))


def test_an_independent_redfish_client_reads_and_drives_the_lab_bmc(
        bmcs: list[Bmc], tmp_path: Path, mirror: Path) -> None:
    """OpenStack's sushy (a Redfish client built on the DMTF schemas) reads the lab BMC's
    FirmwareInventory, Bios, TaskService and Reset action, and sets a BIOS attribute
    through the pending settings and a reset, as it would on a real BMC."""
    b = bmcs[0]
    b.set_faults([Fault("h1", "firmware_old", {"component": "cpld_mb", "version": "0.2.1.2"}),
                  Fault("h1", "bios_attr", {"attribute": "ProcCStates",
                                            "value": "Enabled"})])
    root = sushy.Sushy(f"https://127.0.0.1:{b.port}/redfish/v1",
                       auth=sushy.auth.BasicAuth(username="nodecert", password=PASSWORD),
                       verify=str(b.cfg.state / "bmc" / "ca.pem"))
    fw = {m.identity: m.version
          for m in root.get_update_service().firmware_inventory.get_members()}
    assert fw["CPLDMB_0"] == "0.2.1.2" and fw["EROT_BMC_0"] == "00.04.0018.0000_n00"
    system = root.get_system("/redfish/v1/Systems/1")
    assert system.bios.attributes["ProcCStates"] == "Enabled"
    assert ResetType.FORCE_RESTART in system.get_allowed_reset_system_values()
    system.bios.set_attributes({"ProcCStates": "Disabled"})
    system.bios.refresh()
    assert system.bios.pending_attributes == {"ProcCStates": "Disabled"}
    system.reset_system(ResetType.FORCE_RESTART)
    system.bios.refresh()
    assert system.bios.attributes["ProcCStates"] == "Disabled"
    # our own push, then the task as sushy reads it
    run = run_firmware(req(inventory(tmp_path, bmcs), mirror=mirror, limit=("h1",)))
    assert run.hosts["h1"].status == "updated", run.hosts["h1"].error
    tasks = root.get_task_service().tasks
    task = tasks.get_member(tasks.members_identities[0])
    assert task.task_state.value == "Completed" and task.percent_complete == 100


def test_an_image_file_name_that_is_not_plain_never_reaches_a_header(tmp_path: Path) -> None:
    """A manifest naming `x.fwpkg"\r\nX-Evil: 1` (CRLF injection into the multipart
    headers): refused when the manifest is read, and by the push itself."""
    from nodecert.core.errors import ManifestError
    from nodecert.firmware.images import Image, ImageError, write_manifest
    evil = 'cpld.fwpkg"\r\nX-Evil: 1'
    write_manifest(tmp_path, [Image(evil, "a" * 64, 1, "cpld_mb", "1", RECIPE)])
    with pytest.raises(ManifestError, match="is not plain"):
        load_manifest(tmp_path)
    with pytest.raises(ImageError, match="not plain"):
        multipart({"Targets": []}, b"x", evil)
    body, _ = multipart({"Targets": []}, b"x", "cpld_mb-0.2.1.6.fwpkg")
    assert b'filename="cpld_mb-0.2.1.6.fwpkg"\r\n' in body
