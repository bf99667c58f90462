"""What nodecert does with a BMC's Redfish service to update it: read its firmware
inventory and BIOS, build a multipart HTTP push, follow the task it starts until it
ends or its time is up."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from nodecert.bmc.redfish import BmcError, RedfishClient, message
from nodecert.firmware.images import ImageError, safe_file_name
from nodecert_node.parse import redfish as rf

TERMINAL = ("Completed", "Exception", "Killed", "Cancelled", "Interrupted")
BUSY_TRIES = 3  # a BMC that answers 503 this many times in a row while a task runs


def read_inventory(client: RedfishClient) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The BMC's FirmwareInventory members ({id, version, odata_id, ...}) and its
    UpdateService."""
    root = client.get("/redfish/v1")
    link = (root.get("UpdateService") or {}).get("@odata.id") if isinstance(root, dict) \
        else None
    if not link:
        raise BmcError("the BMC's service root lists no UpdateService")
    service = client.get(link)
    inv = (service.get("FirmwareInventory") or {}).get("@odata.id") \
        if isinstance(service, dict) else None
    if not inv:
        raise BmcError(f"{link} lists no FirmwareInventory")
    members = []
    links = rf.member_links(client.get(inv), "FirmwareInventory")
    if len(links) > 512:
        raise BmcError(f"the BMC lists {len(links)} firmware members: refused")
    for member in links:
        m = rf.parse_software_inventory(client.get(member))
        members.append({**m, "odata_id": member})
    return members, service


def multipart(params: dict[str, Any], image: bytes, filename: str) -> tuple[bytes, str]:
    """The body of a Redfish multipart HTTP push: UpdateParameters (JSON), UpdateFile.
    A file name that is not plain is refused (it goes into a header as it is)."""
    if not safe_file_name(filename):
        raise ImageError(f"image file name {filename[:120]!r} is not plain (letters, "
                         "digits, . _ + -): not pushed")
    boundary = "nodecert-" + secrets.token_hex(12)
    while boundary.encode() in image:  # never inside the part it delimits
        boundary = "nodecert-" + secrets.token_hex(12)
    parts = [
        (f'--{boundary}\r\nContent-Disposition: form-data; name="UpdateParameters"\r\n'
         "Content-Type: application/json\r\n\r\n").encode() + json.dumps(params).encode(),
        (f'--{boundary}\r\nContent-Disposition: form-data; name="UpdateFile"; '
         f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
         ).encode() + image]
    body = b"\r\n".join(parts) + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def follow_task(client: RedfishClient, path: str, *, timeout_s: float, poll_s: float,
                note: Callable[..., None], stop: threading.Event | None = None
                ) -> tuple[str, str]:
    """Poll a Redfish task until it ends: (TaskState, what the BMC said). A task still
    running at its time limit, or a BMC busy (503) BUSY_TRIES times in a row, ends it
    here as ERROR with the BMC's last words."""
    deadline = time.monotonic() + timeout_s
    busy = 0
    last_seen: tuple[Any, Any] = (None, None)
    said = ""
    while True:
        if stop is not None and stop.is_set():
            return "Interrupted", "stopped before the task ended (the BMC may finish it)"
        status, _, doc = client.request("GET", path)
        if status == 503:
            busy += 1
            said = message(doc) or "HTTP 503 Service Unavailable"
            note("task poll", status=503, bmc_says=said)
            if busy >= BUSY_TRIES:
                return "Unavailable", (f"the BMC answered HTTP 503 {busy} times in a row "
                                       f"while the update ran: {said}")
        elif status != 200 or not isinstance(doc, dict):
            return "Lost", f"GET {path} answered HTTP {status}: {message(doc)}"
        else:
            busy = 0
            state = str(doc.get("TaskState") or "")
            pct = doc.get("PercentComplete")
            said = message(doc)
            if (state, pct) != last_seen:
                note("task", state=state, percent=pct, status_=doc.get("TaskStatus"),
                     bmc_says=said)
                last_seen = (state, pct)
            if state in TERMINAL:
                return state, said
        if time.monotonic() + poll_s > deadline:
            pct_text = f" at {last_seen[1]}%" if last_seen[1] is not None else ""
            return "TimedOut", (f"the task was still {last_seen[0] or 'running'}{pct_text} "
                                f"after {timeout_s:g} s" + (f"; the BMC says: {said}"
                                                           if said else ""))
        time.sleep(poll_s)


def read_bios(client: RedfishClient) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(the system's path, its Bios as parsed, the system document)."""
    systems = client.get("/redfish/v1/Systems")
    links = rf.member_links(systems, "Systems")
    if not links:
        raise BmcError("the BMC lists no system")
    system = client.get(links[0])
    link = (system.get("Bios") or {}).get("@odata.id") if isinstance(system, dict) else None
    if not link:
        raise BmcError(f"{links[0]} lists no Bios")
    return links[0], rf.parse_bios(client.get(link)), system


__all__ = ["BUSY_TRIES", "TERMINAL", "follow_task", "multipart", "read_bios",
           "read_inventory"]
