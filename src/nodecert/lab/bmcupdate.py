"""A lab BMC's UpdateService and TaskService, the part sushy-tools' static emulator does
not play: a multipart HTTP push (DMTF Redfish DSP0266, "multipart HTTP push updates")
of a SIMULATED firmware image to a FirmwareInventory member, answered 202 with a Task
that runs (TaskState Running, PercentComplete rising) and ends Completed with the
member at the image's version, or Exception with the BMC's message.

The image is the lab's own format (lab_image): a header line naming the component and
version, then the payload. Like a real BMC this one refuses an image for another
component, a malformed image, and a downgrade unless the push sets ForceUpdate. Faults
of the host's hardware description: fw_task_stuck (the task stops at `percent`),
fw_busy (every poll of a task answers 503), fw_not_applied (a task reaches Completed
and the inventory keeps the old version).

Updated versions persist in BMC_DIR/firmware.json until the host is reset.

SIMULATED -- NOT REAL HARDWARE.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.firmware.images import Image, write_manifest
from nodecert.firmware.plan import order
from nodecert.lab.bmcmodel import read_state
from nodecert.lab.simhw.nodecert_simhw.faults import Faults
from nodecert.stack.firmware import Component, Recipe, find_recipe, list_recipes

PUSH_URI = "/redfish/v1/UpdateService/update-multipart"
BIOS_SETTINGS = "/redfish/v1/Systems/1/Bios/Settings"
RESET = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
TASKS = "/redfish/v1/TaskService/Tasks"
MAGIC = b"NODECERT-LAB-FIRMWARE-IMAGE\n"
RUN_S = 1.5  # how long a simulated update takes


def lab_image(component: str, version: str, payload: bytes) -> bytes:
    """A SIMULATED firmware image for the lab's BMCs."""
    return MAGIC + json.dumps({"component": component, "version": version}).encode() + \
        b"\n" + payload


@dataclass
class Task:
    id: str
    member: str
    component: str
    version: str
    started: float
    state: str = "Running"
    messages: list[dict[str, str]] = field(default_factory=list)
    stuck_at: int | None = None

    def doc(self, now: float) -> dict[str, Any]:
        pct = 100
        if self.state == "Running":
            pct = min(99, int((now - self.started) / RUN_S * 100))
            if self.stuck_at is not None:
                pct = min(pct, self.stuck_at)
        return {"@odata.id": f"{TASKS}/{self.id}", "@odata.type": "#Task.v1_7_0.Task",
                "Id": self.id, "Name": f"Update of {self.member.rsplit('/', 1)[-1]}",
                "TaskState": self.state, "PercentComplete": pct,
                "TaskStatus": {"Running": "OK", "Completed": "OK"}.get(self.state,
                                                                        "Critical"),
                "StartTime": time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                           time.gmtime(self.started)),
                "Messages": self.messages}


def _msg(message_id: str, text: str, severity: str = "OK") -> dict[str, str]:
    return {"MessageId": message_id, "Message": text, "Severity": severity}


class Updates:
    """The BMC's update state: its tasks (in memory) and the versions updates set."""

    def __init__(self, bmc_dir: Path, hw: Any, members: Any,
                 changed: Any = None) -> None:
        self.bmc_dir = bmc_dir
        self._hw = hw  # () -> the host's hardware description
        self._members = members  # () -> {Id: {"name", "version"}} as the BMC lists them
        self._changed = changed  # () -> None: the inventory is shown anew at once
        self.tasks: dict[str, Task] = {}
        self.lock = threading.Lock()

    def _set(self, member_id: str, version: str) -> None:
        self._write("firmware.json", {**read_state(self.bmc_dir / "firmware.json"),
                                      member_id: version})

    def push(self, content_type: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """A multipart push: (HTTP status, the Task or an error document)."""
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
        parts = {p.get_param("name", header="content-disposition"): p
                 for p in msg.iter_parts()} if msg.is_multipart() else {}
        if "UpdateParameters" not in parts or "UpdateFile" not in parts:
            return 400, _error("Base.1.8.PropertyMissing", "a multipart push needs the "
                               "parts UpdateParameters and UpdateFile")
        try:
            got = parts["UpdateParameters"].get_payload(decode=True)
            params = json.loads(got if isinstance(got, bytes) else b"")
            targets = params["Targets"] if isinstance(params, dict) else None
        except ValueError:
            targets = None
        if not isinstance(targets, list) or len(targets) != 1:
            return 400, _error("Base.1.8.MalformedJSON", "UpdateParameters must name one "
                               "target in Targets")
        member = str(targets[0])
        member_id = member.rstrip("/").rsplit("/", 1)[-1]
        listed = self._members()
        if member_id not in listed:
            return 400, _error("Base.1.8.ResourceNotFound",
                               f"no firmware inventory member {member}")
        raw = parts["UpdateFile"].get_payload(decode=True)
        image = raw if isinstance(raw, bytes) else b""
        with self.lock:
            tid = str(len(self.tasks) + 1)
            head, _, _ = image[len(MAGIC):].partition(b"\n")
            task = Task(tid, member, str(listed[member_id]["name"]), "", time.time())
            self.tasks[tid] = task
            faults = Faults(self._hw())
            stuck = faults.setting("fw_task_stuck")
            if stuck is not None:
                task.stuck_at = int(stuck.get("percent", 40))
            try:
                meta = json.loads(head) if image.startswith(MAGIC) else None
            except ValueError:
                meta = None
            running = str(listed[member_id]["version"])
            if not isinstance(meta, dict) or "version" not in meta:
                task.state = "Exception"
                task.messages = [_msg("Update.1.0.InvalidImage", "the image is not a "
                                      "firmware package this BMC accepts", "Critical")]
            elif meta.get("component") != task.component:
                task.state = "Exception"
                task.messages = [_msg("Update.1.0.TargetDetermined", f"the image is for "
                                      f"{meta.get('component')}, not for {task.component}",
                                      "Critical")]
            elif order(str(meta["version"]), running) == -1 and not params.get("ForceUpdate"):
                task.state = "Exception"
                task.messages = [_msg("Update.1.0.UpdateNotAllowed",
                                      f"image version {meta['version']} is older than the "
                                      f"running {running}: a downgrade needs ForceUpdate",
                                      "Critical")]
            else:
                task.version = str(meta["version"])
        return 202, task.doc(time.time())

    def task(self, tid: str) -> tuple[int, dict[str, Any]]:
        if Faults(self._hw()).setting("fw_busy") is not None:
            return 503, _error("Base.1.8.ServiceTemporarilyUnavailable",
                               "the BMC is busy applying firmware; retry later")
        with self.lock:
            task = self.tasks.get(tid)
            if task is None:
                return 404, _error("Base.1.8.ResourceNotFound", f"no task {tid}")
            now = time.time()
            if task.state == "Running" and task.stuck_at is None and \
                    now - task.started >= RUN_S:
                # fw_not_applied: the task says Completed, the inventory keeps the old one
                if Faults(self._hw()).setting("fw_not_applied") is None:
                    self._set(task.member.rsplit("/", 1)[-1], task.version)
                task.state = "Completed"
                task.messages = [_msg("Update.1.0.UpdateSuccessful",
                                      f"{task.component} updated to {task.version}")]
            return 200, task.doc(now)

    # --- BIOS: pending settings, applied by a reset of the system -----------------------

    def _write(self, name: str, data: dict[str, Any]) -> None:
        tmp = self.bmc_dir / f"{name}.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(self.bmc_dir / name)
        if self._changed is not None:
            self._changed()

    def _read(self, name: str) -> dict[str, Any]:
        return read_state(self.bmc_dir / name)

    def patch_bios(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """PATCH of the Bios Settings object: its Attributes become pending."""
        try:
            doc = json.loads(body)
        except ValueError:
            return 400, _error("Base.1.8.MalformedJSON", "the body is not JSON")
        attrs = doc.get("Attributes") if isinstance(doc, dict) else None
        if not isinstance(attrs, dict) or not all(
                isinstance(v, str | int | bool) for v in attrs.values()):
            return 400, _error("Base.1.8.PropertyValueTypeError",
                               "Attributes must map attribute names to values")
        with self.lock:
            pending = {**self._read("bios-pending.json"), **attrs}
            self._write("bios-pending.json", pending)
        return 200, {"@odata.id": BIOS_SETTINGS, "Attributes": pending}

    def reset(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """ComputerSystem.Reset: the system restarts and the BIOS applies what is pending
        (the lab host's container itself is not restarted)."""
        try:
            kind = json.loads(body).get("ResetType")
        except (ValueError, AttributeError):
            kind = None
        if kind not in ("ForceRestart", "GracefulRestart", "On", "ForceOff", "PowerCycle"):
            return 400, _error("Base.1.8.ActionParameterValueNotInList",
                               f"ResetType {kind!r} is not one this system takes")
        with self.lock:
            pending = self._read("bios-pending.json")
            if pending and kind != "ForceOff":
                self._write("bios.json", {**self._read("bios.json"), **pending})
                self._write("bios-pending.json", {})
        return 204, {}

    def collection(self) -> dict[str, Any]:
        with self.lock:
            ids = sorted(self.tasks, key=int)
        return {"@odata.id": TASKS, "@odata.type": "#TaskCollection.TaskCollection",
                "Name": "Tasks", "Members": [{"@odata.id": f"{TASKS}/{i}"} for i in ids],
                "Members@odata.count": len(ids)}


def _error(message_id: str, text: str) -> dict[str, Any]:
    return {"error": {"code": message_id, "message": text,
                      "@Message.ExtendedInfo": [_msg(message_id, text, "Critical")]}}




def _lab_images(recipe: Recipe) -> list[tuple[str, bytes, Component]]:
    """(file under firmware/, bytes, component) of the SIMULATED image of each
    out-of-band component of the recipe at the recipe's version (the same bytes always)."""
    out = []
    for comp in recipe.components.values():
        if comp.redfish:
            rel = f"{recipe.name}/{comp.name}-{comp.version}.fwpkg"
            out.append((rel, lab_image(comp.name, comp.version,
                                       hashlib.sha256(rel.encode()).digest() * 64), comp))
    return out


def lab_image_pins(recipe: str) -> dict[str, str]:
    """The lab's `nodecert_firmware_images` for a recipe: the digest of each SIMULATED
    image, as a site pins its vendor's (the lab's inventory carries them)."""
    return {comp.name: hashlib.sha256(data).hexdigest()
            for _, data, comp in _lab_images(find_recipe(recipe))}


def write_lab_images(mirror: Path) -> Path:
    """A mirror's firmware directory with a SIMULATED image of every out-of-band
    component of every shipped recipe at the recipe's version, and its manifest."""
    images = []
    for recipe in list_recipes():
        for rel, data, comp in _lab_images(recipe):
            path = mirror / "firmware" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            images.append(Image(rel, hashlib.sha256(data).hexdigest(), len(data), comp.name,
                                comp.version, recipe.name))
    return write_manifest(mirror, images)


__all__ = ["BIOS_SETTINGS", "PUSH_URI", "RESET", "TASKS", "Updates", "lab_image",
           "lab_image_pins", "write_lab_images"]
