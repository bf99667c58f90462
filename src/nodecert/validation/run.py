"""`nodecert validate`: run the node-side checks on every host, in parallel, over SSH.

Per host: connect (paramiko, strict host keys), ship the node code (validators/
nodecert_node, content-addressed, once per version), send the plan (checks,
spec, resolved thresholds, options) and read one JSON event per line back. Each
Result is written to runs/<run>/<host>/results.json as it arrives (atomically),
so an interrupted or dropped run keeps what finished and marks the rest as not
run. An unreachable host is an ERROR for that host; the others go on.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError, ManifestError, UnknownNameError
from nodecert.inventory.bmc import BmcSpec, bmc_spec
from nodecert.inventory.reader import HostSpec, Inventory, resolve
from nodecert.profiles import acceptance, thresholds
from nodecert.runs.layout import RunDir
from nodecert.runs.store import HostLink, HostRun, ValidationRun, record_inputs, write_json
from nodecert.stack import bios, firmware
from nodecert.stack.bios import BiosProfile
from nodecert.stack.firmware import Recipe
from nodecert.stack.manifest import Stack, find_stack
from nodecert.transport.become import BecomeSource, unlock_vault
from nodecert.transport.loadgate import LoadGate
from nodecert.transport.ssh import Endpoint
from nodecert.validation import session as _ssh  # noqa: F401  (registers the SSH runner)
from nodecert.validation import slices
from nodecert.validation import slurmrunner as _slurm  # noqa: F401  (and the Slurm runner)
from nodecert.validation.plan import build_plan
from nodecert.validation.progress import DETAIL_MAX_HOSTS, RunProgress, Snapshot
from nodecert.validation.runner import Runner, runner_class
from nodecert.validation.slices import Slice

Progress = Callable[[str], None]
SWITCH_INTERVAL_S = 0.05


@dataclass(frozen=True)
class ValidateRequest:
    """What `nodecert validate` is asked to do: every setting of one validation run.

    forks: hosts supervised at once, 0 for all of them (connection setup and the node
    code's shipping are bounded on their own). detail: print every host's every line
    (default: when the run has at most DETAIL_MAX_HOSTS hosts); otherwise alarms as they
    happen and a summary line. cli_thresholds and option_overrides: the command line's
    --threshold and --set, over the profile and the suite. runner: a registered runner's
    name (validation/runner.py)."""

    inventory: Path | Inventory  # a path, or the inventory the caller already read
    suite: str = "quick"
    limit: tuple[str, ...] = ()
    stack: str | None = None
    forks: int = 0
    runs_dir: Path = Path("runs")
    cli_thresholds: Mapping[str, Any] | None = None
    scratch: str | None = None
    checks: tuple[str, ...] = ()
    host_timeout_s: float | None = None
    option_overrides: Mapping[str, dict[str, Any]] | None = None
    suite_file: Path | None = None
    become: BecomeSource | None = None
    detail: bool | None = None
    runner: str = "ssh"  # how each node's run is started and read (validation/runner.py)
    # one slice of a run split over several controllers (validation/slices.py): its share
    # of the hosts, written into the run its id names
    slice: Slice | None = None


def _prepare(inventory: Path | Inventory, suite: thresholds.Suite, limit: tuple[str, ...],
             stack: str | None, run_dir: Path, *, cli_thresholds: dict[str, Any],
             scratch: str | None, checks: tuple[str, ...],
             host_timeout_s: float | None,
             option_overrides: dict[str, dict[str, Any]] | None,
             become: BecomeSource | None = None, only: list[str] | None = None
             ) -> tuple[dict[str, HostRun], dict[str, HostLink]]:
    """Plans for every host (of those `only` names, where given: a slice's); raises
    NodecertError on any bad input, before any SSH."""
    unknown = [c for c in checks if c not in suite.checks]
    if unknown:
        raise InventoryError(f"check(s) {', '.join(unknown)} are not in suite {suite.name}",
                             hint=f"suite {suite.name} runs: {', '.join(suite.checks)}")
    inv = resolve(inventory)
    specs = inv.hosts
    if only is not None:
        specs = {h: specs[h] for h in only}
    elif limit:
        specs = {h: specs[h] for h in inv.select(limit, list(specs))}
    if not specs:
        raise InventoryError(f"no hosts in {inv}", hint="add hosts with their spec vars")
    refuse_lab_minimums(suite, specs, inv.path)
    hv = inv.hostvars(sorted(specs))
    endpoints = {n: Endpoint.from_hostvars(n, hv[n]) for n in specs}
    # A become password is read only for the hosts that become (a non-root user).
    need = {n: hv[n] for n, ep in endpoints.items() if ep.become}
    source = become or BecomeSource.from_env()
    passwords = source.passwords(need) if need else {}
    bmcs = _bmc_specs(specs, hv, source)
    stacks: dict[str, Stack] = {}
    runs: dict[str, HostRun] = {}
    links: dict[str, HostLink] = {}
    for name, spec in sorted(specs.items()):
        sname = stack or spec.stack
        st = stacks.setdefault(sname, find_stack(sname)) if sname else None
        plan = build_plan(spec, suite, st, run_dir.name, cli_thresholds=cli_thresholds,
                          scratch=scratch, checks=checks, host_timeout_s=host_timeout_s,
                          option_overrides=option_overrides)
        links[name] = HostLink(
            dataclasses.replace(endpoints[name], become_password=passwords.get(name)),
            bmcs.get(name))
        runs[name] = HostRun(name, spec, plan, st, run_dir / name, simulated=spec.simulated,
                             recipe=_recipe(name, spec, inv.path),
                             bios=_bios(name, spec, inv.path))
    return runs, links


def refuse_lab_minimums(suite: thresholds.Suite, specs: Mapping[str, HostSpec],
                        inventory: Path) -> None:
    """A suite judged by an acceptance profile for simulated hardware (the lab's short
    durations) never runs on a host that is not a lab host: its certificate would claim
    real hardware accepted on lab minimums."""
    if not suite.acceptance or not acceptance.profile(suite.acceptance).simulated_only:
        return
    real = sorted(n for n, s in specs.items() if not s.simulated)
    if real:
        raise InventoryError(
            f"suite {suite.name} is judged by the {suite.acceptance} acceptance profile, "
            f"for simulated hardware only, and host(s) {', '.join(real)} are not lab hosts",
            where=str(inventory),
            hint="validate real hosts with an acceptance suite (standard or full); the lab "
                 "suite is for `nodecert lab` hosts (nodecert_simulated=true)")


def _recipe(name: str, spec: HostSpec, inventory: Path) -> Recipe | None:
    """The host's firmware recipe with the site's components (refused before any SSH)."""
    chosen = spec.validation.get("firmware_recipe")
    if not chosen:
        if spec.validation.get("firmware"):
            raise InventoryError(f"host {name}: nodecert_firmware without "
                                 "nodecert_firmware_recipe", where=str(inventory),
                                 hint="name the recipe the site's components amend")
        return None
    try:
        return firmware.with_overrides(firmware.find_recipe(str(chosen)),
                                       spec.validation.get("firmware"),
                                       where=f"{inventory} (host {name})")
    except (UnknownNameError, ManifestError) as exc:
        raise InventoryError(f"host {name}: {exc.what}", where=str(inventory),
                             hint=exc.hint) from None


def _bios(name: str, spec: HostSpec, inventory: Path) -> BiosProfile | None:
    """The host's BIOS profile with the site's attributes (refused before any SSH)."""
    chosen = spec.validation.get("bios_profile")
    if not chosen:
        if spec.validation.get("bios"):
            raise InventoryError(f"host {name}: nodecert_bios without nodecert_bios_profile",
                                 where=str(inventory),
                                 hint="name the BIOS profile the site's attributes amend")
        return None
    try:
        return bios.with_site(bios.find_profile(str(chosen)), spec.validation.get("bios"),
                              where=f"{inventory} (host {name})")
    except (UnknownNameError, ManifestError) as exc:
        raise InventoryError(f"host {name}: {exc.what}", where=str(inventory),
                             hint=exc.hint) from None


def _bmc_specs(specs: dict[str, HostSpec], hv: dict[str, dict[str, Any]],
               source: BecomeSource) -> dict[str, BmcSpec]:
    """Each host's BMC with its password read (the vault opened once, when needed)."""
    with_bmc = {n: s.validation["bmc"] for n, s in specs.items() if s.validation.get("bmc")}
    if with_bmc and source.vault_file:
        unlock_vault(source.vault_file)
    return {n: bmc_spec(n, b, hv[n], source.vault_file is not None)
            for n, b in sorted(with_bmc.items())}


def open_new_run(request: ValidateRequest, *,
                 before_write: Callable[[dict[str, HostRun], dict[str, HostLink]], None]
                 | None = None) -> ValidationRun:
    """A new run directory with every host's plan and the run's inputs recorded, nothing
    contacted yet (but by `before_write`, given the hosts' runs and links once planned).
    Raises NodecertError on bad input, before anything is written."""
    r = request
    the_suite = thresholds.suite(r.suite, r.suite_file)
    every: list[str] | None = None  # a slice's: every host of the whole run
    only: list[str] | None = None
    if r.slice is None:
        run = RunDir.new(r.runs_dir)
    else:
        run = RunDir((r.runs_dir / r.slice.run_id).resolve())
        inv = resolve(r.inventory)
        every = sorted(inv.select(r.limit, list(inv.hosts)) if r.limit else inv.hosts)
        only = r.slice.hosts(every)
        if not only:
            raise InventoryError(f"slice {r.slice.k} of {r.slice.n} holds no host: the run "
                                 f"has {len(every)}", hint="as many slices as hosts at most")
    run_dir = run.path
    runs, links = _prepare(r.inventory, the_suite, r.limit, r.stack, run_dir, only=only,
                    cli_thresholds=dict(r.cli_thresholds or {}), scratch=r.scratch, checks=r.checks,
                    host_timeout_s=r.host_timeout_s,
                    option_overrides=dict(r.option_overrides or {}) or None, become=r.become)
    if before_write is not None:
        before_write(runs, links)
    specs = {n: hr.spec.as_dict() for n, hr in runs.items()}
    if r.slice is None or every is None:
        run.make()
    else:
        # every slice records the whole run's hosts (the same file from each): the merge
        # knows a host whose slice never came
        slices.join(run, r.slice, every)
        hosts = resolve(r.inventory).hosts
        specs = {n: hosts[n].as_dict() for n in every}
    stacks = {hr.stack.path for hr in runs.values() if hr.stack is not None}
    record_inputs(
        run, {n: hr.plan for n, hr in runs.items()},
        suite={"name": the_suite.name, "file": str(r.suite_file) if r.suite_file else None,
               "description": the_suite.description,
               "checks": list(the_suite.checks), "check_timeout_s": the_suite.check_timeout_s,
               "storage": the_suite.storage, "fabric": the_suite.fabric,
               "load": the_suite.load, "acceptance": the_suite.acceptance},
        specs=specs, stack_files=sorted(stacks))
    for hr in runs.values():
        hr.save(interim=True)  # "pending"; each host's last write is the durable one
    return ValidationRun(run_dir, r.suite, runs, links=links)


def ensure_open_files(need: int) -> None:
    """Raise this process's soft limit on open files towards `need` (up to the hard
    limit): each host of a run holds a socket and, now and then, a results file."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        top = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, top), hard))


# Controller lateness worth a line at the end of the run (seconds in all).
LATE_NOTE_S = 5.0


def _supervise(runner: Runner, forks: int, say: Progress) -> None:
    """Run every host's session on a pool of threads until all end (or Ctrl-C)."""
    runs, stop, view = runner.runs, runner.stop, runner.progress
    done = threading.Event()
    threading.Thread(target=runner.heartbeat, args=(done,), daemon=True).start()
    workers = len(runs) if forks <= 0 else min(forks, len(runs))
    ensure_open_files(4 * workers + 256)
    # Hundreds of threads that each wake for a few packets: at the interpreter's 5 ms
    # switch interval they spend about half the controller's CPU handing the GIL over
    # (measured: 1,000 emulated nodes, 140 s of CPU at 5 ms, 75 s at 50 ms). Restored
    # when the run ends.
    switch = sys.getswitchinterval()
    if workers > DETAIL_MAX_HOSTS:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="validate")
    # Every worker thread is started first, each waiting for `go`: a thread's start
    # waits until it first runs, and once hosts are busy that costs a switch interval
    # each (measured: 5,000 hosts took minutes only to start their threads).
    go = threading.Event()

    def host_job(hr: HostRun) -> None:
        go.wait()
        if not stop.is_set():  # interrupted before it started: stays "pending"
            runner.run_host(hr)

    futures: dict[Future[None], HostRun] = {}
    try:
        futures.update((pool.submit(host_job, hr), hr) for hr in runs.values())
        go.set()
        for f, hr in futures.items():
            while not f.done():
                wait([f], timeout=1.0)  # wakes for Ctrl-C; never raises the host's error
            if f.exception() is not None:  # one host's fault never sinks the others
                exc = f.exception()
                hr.status = "lost"
                hr.error = f"internal error while handling this host: {exc!r}"
                hr.finish_missing(hr.error, "NC-HOST-LOST")
                hr.save()
    except KeyboardInterrupt:
        stop.set()
        go.set()
        say("interrupted: stopping the checks still running, keeping finished results ...")
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        go.set()  # a Ctrl-C while the workers were being started must not strand them
        done.set()
        pool.shutdown(wait=True)
        runner.gate.stop()
        sys.setswitchinterval(switch)
        view.tick(final=True)


def validate(request: ValidateRequest, *, progress: Progress | None = None,
             stop: threading.Event | None = None,
             status: Callable[[Snapshot], None] | None = None) -> ValidationRun:
    """Validate every (limited) host. Raises NodecertError only on bad input.

    progress: each line of the run as it happens; stop: set to end the run early (what
    finished is kept); status: fed once a second with a snapshot (a live view), instead of
    lines, when the run is too large to print every host's every line."""
    say: Progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    runner_cls = runner_class(request.runner)  # an unknown one: refused before any write
    inventory = resolve(request.inventory)  # read once: the hosts' plans and the runner's
    request = dataclasses.replace(request, inventory=inventory)
    suite, checks, detail = request.suite, request.checks, request.detail
    the_suite = thresholds.suite(suite, request.suite_file)
    stop = stop or threading.Event()
    gate = LoadGate()
    made: list[Runner] = []

    def make_runner(runs: dict[str, HostRun], links: dict[str, HostLink]) -> None:
        # before anything is written: a runner that cannot reach the hosts at all (no
        # launch host, its engine down) is refused without leaving a run behind
        view = RunProgress(runs, say, status=status,
                           detail=len(runs) <= DETAIL_MAX_HOSTS if detail is None else detail)
        made.append(runner_cls.for_run(inventory, runs, links, say, stop,
                                       become=request.become, progress=view, gate=gate))
    try:
        result = open_new_run(request, before_write=make_runner)
    except BaseException:
        for r in made:
            r.close()
        raise
    run_dir, runs = result.run_dir, result.hosts
    runner, view = made[0], made[0].progress
    gate.start()
    n_checks = len(checks or the_suite.checks)
    say(f"validating {len(runs)} host(s), suite {suite} ({n_checks} checks); "
        f"results in {run_dir}"
        + ("" if view.detail else "; each host's progress in <host>/progress.log"))
    try:
        _supervise(runner, request.forks, say)
    finally:
        runner.close()
    if gate.late_s >= LATE_NOTE_S:
        say(f"note: this controller lost {gate.late_s:.0f} s to its own load during the run "
            f"(at worst {gate.worst_lag_s:.1f} s at once): other work on its machine; the "
            "nodes' time limits counted only their own silence")
    if stop.is_set():
        result.interrupted = True
        for hr in runs.values():
            if hr.status == "pending":
                hr.status, hr.error = "interrupted", "interrupted before the host started"
                hr.finish_missing(hr.error, "NC-NOT-RUN-INTERRUPTED")
                hr.save()
    if request.slice is None:
        write_json(result.dir.summary, result.summary())
        return result
    merged = slices.finish(result.dir, request.slice, result.summary())
    if merged is not None:
        say(f"every slice of run {request.slice.run_id} ended: merged, "
            f"{merged.verdict.name} over {len(merged.summary['hosts'])} host(s)")
    return result


__all__ = ["HostRun", "ValidateRequest", "ValidationRun", "ensure_open_files", "open_new_run",
           "validate"]
