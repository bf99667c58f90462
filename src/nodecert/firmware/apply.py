"""`nodecert firmware plan` and `apply`: each host's BMC read over Redfish, its recipe's
components compared, and (apply) each component behind pushed to the BMC's
UpdateService (multipart HTTP push, the image from the mirror after its sha256 matched)
and the BMC's task followed until it ends or its time is up.

Never a downgrade unless asked (`allow_downgrade`, sent as ForceUpdate); at most
`max_parallel` hosts at a time; one host's failure never stops the others. Every step
(what was sent, the task's states and the BMC's messages) is recorded in the run's
directory, one JSON file a host; a stuck or failed task is ERROR with the BMC's words.

One host's update is one sequence kept here: read the BMC, plan, push each image and
follow its task, set the BIOS and reset, read everything again; the Redfish operations
it uses are in redfishops.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.bmc.redfish import BmcError, NotFound, RedfishClient, message
from nodecert.core.errors import InventoryError
from nodecert.firmware.images import (
    Image,
    ImageError,
    find_image,
    load_manifest,
    read_verified,
)
from nodecert.firmware.plan import Step, plan_host
from nodecert.firmware.redfishops import follow_task, multipart, read_bios, read_inventory
from nodecert.inventory.bmc import BmcSpec, bmc_spec
from nodecert.inventory.reader import resolve
from nodecert.runs.layout import RunDir
from nodecert.stack.bios import BiosProfile, differences, find_profile, with_site
from nodecert.stack.firmware import (
    Recipe,
    find_recipe,
    judge_recipe,
    same_version,
    with_image_pins,
    with_overrides,
)
from nodecert.transport.become import BecomeSource, unlock_vault
from nodecert_node.contract import Verdict, write_atomic
from nodecert_node.parse import ParseError
from nodecert_node.parse import redfish as rf

Progress = Callable[[str], None]


@dataclass(frozen=True)
class FirmwareRequest:
    inventory: Path
    limit: tuple[str, ...] = ()
    mirror: Path | None = None  # None: plan only
    max_parallel: int = 4
    allow_downgrade: bool = False
    task_timeout_s: float = 600.0
    poll_s: float = 1.0
    runs_dir: Path = Path("runs")
    bios: bool = False  # also set the BIOS attributes of the host's profile (and reset it)


@dataclass
class HostFirmware:
    host: str
    recipe: str
    status: str = "pending"  # pending | at-recipe | updated | behind | failed | unreachable
    error: str = ""
    steps: list[Step] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    after: dict[str, Any] | None = None  # firmware.recipe after the updates

    def note(self, what: str, **kw: Any) -> None:
        self.log.append({"t": round(time.time(), 3), "what": what, **kw})

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "recipe": self.recipe, "status": self.status,
                "error": self.error, "plan": [s.as_dict() for s in self.steps],
                "log": self.log, "after": self.after}


@dataclass
class FirmwareRun:
    run_dir: Path | None
    hosts: dict[str, HostFirmware]
    applied: bool

    @property
    def ok(self) -> bool:
        return all(h.status in ("at-recipe", "updated") for h in self.hosts.values())

    def as_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir) if self.run_dir else None,
                "applied": self.applied, "ok": self.ok,
                "hosts": {n: h.as_dict() for n, h in sorted(self.hosts.items())}}


Target = tuple[BmcSpec, Recipe, BiosProfile | None]


def _targets(request: FirmwareRequest) -> dict[str, Target]:
    """Every chosen host's BMC and recipe; refuses bad input before any connection."""
    inventory = resolve(request.inventory)
    specs = inventory.hosts
    if request.limit:
        missing = [h for h in request.limit if h not in specs]
        if missing:
            raise InventoryError(f"no host {', '.join(missing)} in the inventory",
                                 where=str(request.inventory))
        specs = {h: specs[h] for h in request.limit}
    hv = inventory.hostvars(sorted(specs))
    out = {}
    for name, spec in sorted(specs.items()):
        chosen, bmc = spec.validation.get("firmware_recipe"), spec.validation.get("bmc")
        if not chosen or not bmc:
            raise InventoryError(f"host {name}: firmware needs nodecert_firmware_recipe and "
                                 "nodecert_bmc", where=str(request.inventory),
                                 hint="name the host's recipe and its BMC, or --limit the "
                                      "hosts that have them")
        where = f"{request.inventory} (host {name})"
        recipe = with_image_pins(
            with_overrides(find_recipe(str(chosen)), spec.validation.get("firmware"),
                           where=where), spec.validation.get("firmware_images"), where=where)
        profile = spec.validation.get("bios_profile")
        if request.bios and not profile:
            raise InventoryError(f"host {name}: --bios needs nodecert_bios_profile",
                                 where=str(request.inventory))
        bios = with_site(find_profile(str(profile)), spec.validation.get("bios"),
                         where=where) if profile else None
        out[name] = (bmc_spec(name, bmc, hv[name], False), recipe, bios)
    return out


@dataclass
class _Host:
    """One host's update: its BMC session and what the run was asked."""
    hf: HostFirmware
    client: RedfishClient
    recipe: Recipe
    request: FirmwareRequest
    images: list[Image]
    say: Progress
    stop: threading.Event
    bios: BiosProfile | None = None
    service: dict[str, Any] = field(default_factory=dict)


def _push(h: _Host, step: Step, image: Image, data: bytes) -> tuple[str | None, str]:
    """POST the image: (the task's path, or None; what the BMC said)."""
    uri = h.service.get("MultipartHttpPushUri")
    if not isinstance(uri, str) or not uri.startswith("/redfish/v1"):
        return None, "the BMC's UpdateService offers no MultipartHttpPushUri"
    body, ctype = multipart({"Targets": [step.member],
                             "ForceUpdate": step.action == "downgrade",
                             "@Redfish.OperationApplyTime": "Immediate"}, data,
                            Path(image.file).name)
    status, headers, doc = h.client.request("POST", uri, body, ctype)
    if status not in (200, 201, 202):
        return None, f"POST {uri} answered HTTP {status}: {message(doc)}"
    task = headers.get("location") or (doc.get("@odata.id") if isinstance(doc, dict)
                                       else None)
    if not task or not str(task).startswith("/redfish/v1"):
        return None, f"POST {uri} answered {status} without a task to follow"
    return str(task), message(doc)


def _update(h: _Host, step: Step) -> str | None:
    """One component to its recipe version; the failure, or None."""
    hf, mirror = h.hf, h.request.mirror
    assert mirror is not None
    image = find_image(h.images, h.recipe.name, step.component, step.wanted)
    if image is None:
        hf.note("no image", component=step.component, version=step.wanted)
        return f"{step.component}: the mirror has no image of {step.wanted}"
    pin = h.recipe.components[step.component].image_sha256
    # The mirror's manifest is unsigned: its digest only proves the bytes are the ones it
    # lists. What may be pushed is decided by the pin the site (or the recipe) gave.
    if pin is None or pin != image.sha256:
        why = (f"no image digest is pinned for {step.component} {step.wanted}: the mirror's "
               "manifest alone is not trusted; pin the vendor's image digest with "
               "nodecert_firmware_images" if pin is None else
               f"the mirror's image {image.file} is sha256 {image.sha256}, the pinned digest "
               f"is {pin}: not pushed")
        hf.note("image refused", component=step.component, why=why)
        return f"{step.component}: {why}"
    try:
        data = read_verified(mirror, image)
    except ImageError as exc:
        hf.note("image refused", component=step.component, why=str(exc))
        return f"{step.component}: {exc}"
    h.say(f"{hf.host:<14} {step.component}: {step.current} -> {step.wanted} ({image.file})")
    hf.note("push", component=step.component, member=step.member, image=image.file,
            sha256=image.sha256, force=step.action == "downgrade")
    task, said = _push(h, step, image, data)
    if task is None:
        hf.note("push failed", component=step.component, bmc_says=said)
        return f"{step.component}: {said}"
    hf.note("task started", component=step.component, task=task)

    def note(what: str, **kw: Any) -> None:
        hf.note(what, component=step.component, **kw)
    state, said = follow_task(h.client, task, timeout_s=h.request.task_timeout_s,
                              poll_s=h.request.poll_s, note=note, stop=h.stop)
    if state != "Completed":
        return f"{step.component}: task {task} ended {state}" + (f": {said}" if said else "")
    # The task's word is not the result: the member itself must now report the version.
    try:
        now = rf.parse_software_inventory(h.client.get(step.member)).get("version")
    except (BmcError, ParseError) as exc:
        what = exc.what if isinstance(exc, BmcError) else str(exc)
        return (f"{step.component}: task {task} Completed, but {step.member} could not be "
                f"read again: {what}")
    note("read back", version=now)
    if now is None or not same_version(str(now), step.wanted):
        return (f"{step.component}: task {task} Completed, but {step.member} still reports "
                f"{now or 'no version'}, not {step.wanted}: the update was not applied")
    return None


def _set_bios(h: _Host) -> str | None:
    """The profile's attributes written to the BIOS's pending settings, the system reset,
    and the attributes read back until they hold; the failure, or None."""
    assert h.bios is not None
    hf, client = h.hf, h.client
    _, bios, system = read_bios(client)
    todo = differences(h.bios, bios["attributes"])
    if not todo:
        hf.note("bios", state="as wanted")
        return None
    if not bios["settings"]:
        return "BIOS: the BMC offers no pending-settings object to write"
    hf.note("bios set", attributes=todo, settings=bios["settings"])
    h.say(f"{hf.host:<14} BIOS: " + ", ".join(f"{k}={v}" for k, v in todo.items()))
    status, _, doc = client.request("PATCH", bios["settings"], json.dumps(
        {"Attributes": todo}).encode())
    if status not in (200, 202, 204):
        return f"BIOS: PATCH {bios['settings']} answered HTTP {status}: {message(doc)}"
    action = ((system.get("Actions") or {}).get("#ComputerSystem.Reset") or {}) \
        if isinstance(system, dict) else {}
    target = action.get("target") if isinstance(action, dict) else None
    if not isinstance(target, str) or not target.startswith("/redfish/v1"):
        return "BIOS: settings pending, but the system offers no Reset action to apply them"
    status, _, doc = client.request("POST", target, json.dumps(
        {"ResetType": "ForceRestart"}).encode())
    hf.note("reset", target=target, status=status, bmc_says=message(doc))
    if status not in (200, 202, 204):
        return f"BIOS: POST {target} answered HTTP {status}: {message(doc)}"
    deadline = time.monotonic() + h.request.task_timeout_s
    while True:
        try:
            _, now, _ = read_bios(client)
            left = differences(h.bios, now["attributes"])
        except BmcError as exc:  # the BMC restarting with the system: try again
            left = {"(unreadable)": str(exc)}
        if not left:
            hf.note("bios", state="applied")
            return None
        if time.monotonic() + h.request.poll_s > deadline or h.stop.is_set():
            return ("BIOS: after the reset, " + ", ".join(
                f"{k} is still not {v}" for k, v in left.items()))
        time.sleep(h.request.poll_s)


def _bios_steps(h: _Host) -> list[Step]:
    """A step for each BIOS attribute the host's recipe sets that its BMC reads otherwise
    now (none where the recipe sets no BIOS)."""
    if h.bios is None:
        return []
    link, bios, _ = read_bios(h.client)
    return [Step(f"BIOS {k}", link, str(bios["attributes"].get(k)), str(v), "set")
            for k, v in differences(h.bios, bios["attributes"]).items()]


def _apply_host(h: _Host) -> None:
    hf, request = h.hf, h.request
    try:
        members, h.service = read_inventory(h.client)
        hf.steps = plan_host(h.recipe, members)
        hf.note("read", members={m["id"]: m["version"] for m in members})
        hf.steps += _bios_steps(h)
        todo = [s for s in hf.steps if s.action in ("update", "unordered")
                or (s.action == "downgrade" and request.allow_downgrade)]
        for s in hf.steps:
            if s.action == "downgrade" and not request.allow_downgrade:
                hf.note("refused", component=s.component, member=s.member,
                        why=f"{s.current} -> {s.wanted} is a downgrade (--allow-downgrade "
                            "to make it)")
        if request.mirror is None:
            hf.status = "at-recipe" if all(s.action == "current" for s in hf.steps) \
                else "behind"
            return
        failures = []
        for s in todo:
            if h.stop.is_set():
                failures.append("stopped before every component was updated")
                break
            failed = _update(h, s)
            if failed:
                failures.append(failed)
        if request.bios and h.bios is not None and not h.stop.is_set():
            failed = _set_bios(h)
            if failed:
                failures.append(failed)
        after, _ = read_inventory(h.client)
        judged = judge_recipe(h.recipe, after, None)
        hf.after = {"verdict": judged.verdict.name, "summary": judged.summary,
                    "bom": judged.facts.get("bom")}
        hf.note("read after", members={m["id"]: m["version"] for m in after})
        behind_now = [s for s in plan_host(h.recipe, after) if s.action != "current"]
        if request.bios:
            behind_now += _bios_steps(h)
        if failures:
            hf.status, hf.error = "failed", "; ".join(failures)
        elif behind_now:
            hf.status = "behind"
            hf.error = "; ".join(f"{s.component}: {s.current or 'unreported'}, wanted "
                                 f"{s.wanted}" + (" (a downgrade: not made)"
                                                  if s.action == "downgrade" else "")
                                 for s in behind_now)
        else:
            hf.status = "updated" if todo else "at-recipe"
    except (BmcError, ParseError) as exc:
        what = exc.what if isinstance(exc, BmcError) else str(exc)
        hf.status = "unreachable" if isinstance(exc, BmcError) and not isinstance(
            exc, NotFound) else "failed"
        hf.error = what
        hf.note("error", error=what)
    finally:
        h.client.close()


def run_firmware(request: FirmwareRequest, *, progress: Progress | None = None,
                 stop: threading.Event | None = None) -> FirmwareRun:
    """Plan (request.mirror is None) or apply; raises only on bad input."""
    say = progress or (lambda line: None)
    stop = stop or threading.Event()
    if request.max_parallel < 1:
        raise InventoryError("--max-parallel must be at least 1")
    targets = _targets(request)
    images = load_manifest(request.mirror) if request.mirror is not None else []
    source = BecomeSource.from_env()
    if source.vault_file:
        unlock_vault(source.vault_file)
    run = RunDir.new(request.runs_dir, "firmware").make() if request.mirror else None
    hosts = {n: HostFirmware(n, t[1].name) for n, t in targets.items()}

    def one(name: str) -> None:
        spec, recipe, bios = targets[name]
        hf = hosts[name]
        say(f"{name:<14} reading the BMC {spec.describe()} ...")
        _apply_host(_Host(hf, RedfishClient(spec), recipe, request, images, say, stop, bios))
        say(f"{name:<14} {hf.status}" + (f": {hf.error}" if hf.error else ""))
        if run is not None:
            write_atomic(str(run.path / f"{name}.json"),
                         json.dumps(hf.as_dict(), indent=1).encode())

    with ThreadPoolExecutor(max_workers=request.max_parallel,
                            thread_name_prefix="firmware") as pool:
        list(pool.map(one, sorted(hosts)))
    result = FirmwareRun(run.path if run else None, hosts, request.mirror is not None)
    if run is not None:
        write_atomic(str(run.path / "firmware.json"),
                     json.dumps(result.as_dict(), indent=1).encode())
    return result


def verdict_of(run: FirmwareRun) -> Verdict:
    return Verdict.PASS if run.ok else Verdict.FAIL


__all__ = ["FirmwareRequest", "FirmwareRun", "HostFirmware", "follow_task", "multipart",
           "read_inventory", "run_firmware", "verdict_of"]
