"""container.gpu_smoke: the container GPU path, as a training job's container sees it.

The NVIDIA Container Toolkit installed, its CDI spec present and generated for the
driver that runs now (a spec older than the driver breaks containers silently after a
driver upgrade), then the order's image (pinned by digest, from a registry or an image
archive) run with every GPU through CDI: the GPUs nvidia-smi lists inside must be the
GPUs it lists outside, by UUID.

The order names the image in `nodecert_container` (the plan's spec "container"); an
order without one still has its toolkit and CDI spec judged where the toolkit is
installed.
"""

from __future__ import annotations

import os
from typing import Any

from nodecert_node import gpu
from nodecert_node.context import Ctx, judge_findings, try_text
from nodecert_node.contract import Evidence, Result, Verdict
from nodecert_node.parse import ParseError, cdi
from nodecert_node.parse import engine as engine_errors
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run

CDI_SPECS = ("/etc/cdi/nvidia.yaml", "/etc/cdi/nvidia.json", "/var/run/cdi/nvidia.yaml",
             "/var/run/cdi/nvidia.json")
ENGINES = ("podman", "docker")
RUN_TIMEOUT_S = 600.0


def judge_container(*, ordered: dict[str, Any] | None, toolkit: str | None,
                    spec_path: str | None, spec_text: str | None, listed: list[str],
                    driver: str | None, outside: list[dict[str, Any]] | None,
                    inside: list[dict[str, Any]] | None, inside_error: str | None,
                    evidence: tuple[Evidence, ...] = ()) -> Result:
    """Pure: the toolkit, the CDI spec against the driver, the GPUs inside and outside."""
    name = "container.gpu_smoke"
    fails: list[str] = []
    if toolkit is None:
        if not ordered:
            return Result(name, Verdict.PASS, "the order names no container image and the "
                          "NVIDIA Container Toolkit is not installed: not tested",
                          evidence=evidence)
        return Result(name, Verdict.FAIL, "the NVIDIA Container Toolkit is not installed "
                      "(nvidia-ctk not found)", evidence=evidence,
                      fault_code="NC-CONTAINER-TOOLKIT",
                      remediation="Provision the container_toolkit role (or install the "
                                  "pinned nvidia-container-toolkit packages).")
    if spec_text is None:
        fails.append("no CDI spec for the GPUs (looked in " + ", ".join(CDI_SPECS) + ")")
    else:
        try:
            made_for = cdi.driver_version(spec_text)
        except ParseError as exc:
            made_for = None
            fails.append(f"CDI spec {spec_path}: {exc}")
        kind = cdi.spec_kind(spec_text)
        if kind != "nvidia.com/gpu":
            fails.append(f"CDI spec {spec_path} is of kind {kind!r}, not nvidia.com/gpu")
        if driver and made_for and made_for != driver:
            fails.append(f"CDI spec {spec_path} was generated for driver {made_for}, the "
                         f"driver running is {driver}: containers get the old driver's "
                         "files (stale after a driver change)")
        if "nvidia.com/gpu=all" not in listed:
            fails.append("nvidia-ctk cdi list has no nvidia.com/gpu=all device")
    if ordered:
        if inside_error:
            fails.append(f"the GPU container failed: {inside_error}")
        elif inside is not None and outside is not None:
            want = sorted(g["uuid"] for g in outside)
            got = sorted(g["uuid"] for g in inside)
            if got != want:
                missing = sorted(set(want) - set(got))
                fails.append(f"nvidia-smi inside the container lists {len(got)} GPUs, "
                             f"outside {len(want)}" + (f"; missing {', '.join(missing[:4])}"
                                                       if missing else ""))
    seen = f"{len(inside)} GPUs inside the container, as outside" if inside is not None \
        else "no container image ordered: the toolkit and CDI spec only"
    fix = ("Regenerate the CDI spec for the running driver (`nvidia-ctk cdi generate "
           "--output=/etc/cdi/nvidia.yaml`, which the container_toolkit role's handler does "
           "after a driver change), then re-run `nodecert validate`.")
    return judge_findings(
        name, fails, [], f"toolkit {toolkit}, CDI spec for driver {driver}; {seen}",
        value={"toolkit": toolkit, "cdi_spec": spec_path, "driver": driver,
               "gpus_inside": len(inside) if inside is not None else None},
        evidence=evidence, fault_code="NC-CONTAINER-GPU" if fails else "",
        remediation=fix if fails else "")


def _present(ctx: Ctx, engine: str, image_id: str, ev: list[Evidence]) -> bool:
    """Whether the engine already holds the image with this id."""
    if not image_id:
        return False
    got = try_text(ev, [engine, "image", "inspect", "--format", "{{.Id}}", image_id], ctx,
                   name=f"{engine} image inspect")
    return got is not None and got.strip().replace("sha256:", "") == \
        image_id.replace("sha256:", "")


def _inside(ctx: Ctx, ordered: dict[str, Any], ev: list[Evidence]
            ) -> tuple[list[dict[str, Any]] | None, str | None]:
    engine = str(ordered.get("engine") or "podman")
    timeout = min(RUN_TIMEOUT_S, float(ctx.plan.check_timeout_s) * 0.8)
    ref = str(ordered.get("image") or "")
    if ordered.get("archive") and _present(ctx, engine, str(ordered.get("image_id") or ""),
                                            ev):
        # the pinned image (by its id: content-addressed) is already in the engine's
        # store: loading the archive again would give the same bytes
        ref = str(ordered["image_id"])
    elif ordered.get("archive"):
        try:
            out = run([engine, "load", "-i", str(ordered["archive"])], timeout=timeout,
                      name=f"{engine} load")
            ev.append(out.evidence)
        except ToolError as exc:
            ev.extend([exc.evidence] if exc.evidence else [])
            return None, f"{engine} could not load the image archive {ordered['archive']}: " \
                         f"{exc}"
        ref = str(ordered["image_id"])
        got = try_text(ev, [engine, "image", "inspect", "--format", "{{.Id}}", ref], ctx,
                       name=f"{engine} image inspect")
        if got is None or got.strip().replace("sha256:", "") != ref.replace("sha256:", ""):
            return None, (f"the archive holds no image {ref} (the order pins it by its id; "
                          f"found {(got or '').strip()[:80]!r})")
    listing = gpu.backend(ctx).list_argv()
    try:
        out = run([engine, "run", "--rm", "--device", "nvidia.com/gpu=all", ref, *listing],
                  timeout=timeout, name=f"{engine} run {' '.join(listing)}")
    except ToolError as exc:
        ev.extend([exc.evidence] if exc.evidence else [])
        said = exc.evidence.output if exc.evidence else ""
        known = engine_errors.classify_engine_error(said)
        if known:
            return None, f"{exc}: {known['cause']} -- {known['fix']}"
        tail = (said.strip().splitlines() or [""])[-1]
        return None, f"{exc}" + (f": {tail[:200]}" if tail else "")
    ev.append(out.evidence)
    try:
        return cdi.parse_smi_list(out.text), None
    except ParseError as exc:
        return None, str(exc)


@check("container.gpu_smoke", order=32, suites=("quick", "standard", "full", "lab"),
       tools=("nvidia-ctk", gpu.SMI, "podman"),
       description="the container GPU path: toolkit, CDI spec for the running driver, "
                   "the ordered image by digest seeing every GPU")
def container_gpu_smoke(ctx: Ctx) -> Result:
    ordered = ctx.spec.get("container") or None
    ev: list[Evidence] = []
    version = try_text(ev, ["nvidia-ctk", "--version"], ctx)
    toolkit = None
    if version is not None:
        first = (version.strip().splitlines() or [""])[0]
        toolkit = first.rsplit(" ", 1)[-1] if first else "unknown version"
    spec_path = ordered.get("cdi_spec") if ordered else None
    paths = (str(spec_path),) if spec_path else CDI_SPECS
    found = next((p for p in paths if os.path.isfile(p)), None)
    spec_text = None
    if found and toolkit is not None:
        with open(found, encoding="utf-8", errors="replace") as f:
            spec_text = f.read(4 * 1024 * 1024)
        ev.append(Evidence.of("cdi spec", f"cat {found}", 0, spec_text))
    listed: list[str] = []
    if toolkit is not None:
        listed = cdi.parse_ctk_list(try_text(ev, ["nvidia-ctk", "cdi", "list"], ctx) or "")
    try:
        driver, drv_ev = gpu.backend(ctx).driver_version(ctx)
        ev.append(drv_ev)
    except ToolError as exc:  # for facts the check can do without
        ev.extend([exc.evidence] if exc.evidence else [])
        driver = None
    outside = inside = None
    inside_error = None
    # The quick suite (the node timer, the apt hook) judges the toolkit and the spec
    # against the driver; the container itself runs in the standard and full suites.
    run_it = ctx.plan.suite != "quick"
    if ordered and toolkit is not None and run_it:
        try:
            outside = cdi.parse_smi_list(gpu.backend(ctx).list_text(ctx, ev) or "")
        except ParseError as exc:
            inside_error = f"outside the container: {exc}"
        if inside_error is None:
            inside, inside_error = _inside(ctx, ordered, ev)
    res = judge_container(ordered=ordered if run_it else None, toolkit=toolkit,
                          spec_path=found, spec_text=spec_text, listed=listed, driver=driver,
                          outside=outside, inside=inside, inside_error=inside_error,
                          evidence=tuple(ev))
    if ordered and not run_it and toolkit is None:
        return res.with_(verdict=Verdict.FAIL, summary="the NVIDIA Container Toolkit is not "
                         "installed (nvidia-ctk not found)", fault_code="NC-CONTAINER-TOOLKIT",
                         remediation="Provision the container_toolkit role.")
    if ordered and not run_it and res.verdict is Verdict.PASS:
        return res.with_(summary=res.summary.replace(
            "no container image ordered: the toolkit and CDI spec only",
            "the image runs in the standard and full suites"))
    return res
