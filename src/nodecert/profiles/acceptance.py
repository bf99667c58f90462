"""Acceptance profiles (validators/acceptance.yml) and the judgement of one host's run
against one: whether what was measured earns READY, and which stages it lacks.

The judgement is pure: the suite's name and declared profile, the host's plan (its
settings as the run used them, whether it ran only some checks) and its results. It is
made on the control side when a certificate is signed, and stated in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.core.errors import UnknownNameError
from nodecert.profiles.datafiles import render_source, validators_dir
from nodecert_node.contract import Result, Verdict

SCHEMA = "nodecert.acceptance/v1"
# The profile a run that declares none is compared with, to say what it lacks.
PRODUCTION = "production"
# What a measured minimum is read from in its check's value.
MEASURES = ("seconds", "samples_per_gpu", "level")


@dataclass(frozen=True)
class Minimum:
    """The least a stage must have run for its result to count (a burn-in's seconds, a
    soak's samples), with the source of that figure."""

    setting: str          # section.key of the run's options (load.burnin_s)
    value: int
    unit: str
    source: str
    measured: str | None  # which MEASURES the check's value carries
    tolerance: float      # a measured duration may fall short of value by this fraction


@dataclass(frozen=True)
class Stage:
    """One step of an acceptance profile: the checks that make it up, whether it must be
    measured, and the minimum it must reach."""

    name: str
    checks: tuple[str, ...]
    source: str
    measured: bool = False
    multi_gpu: bool = False
    minimum: Minimum | None = None


@dataclass(frozen=True)
class Profile:
    """An acceptance profile (validators/acceptance.yml): the stages a node must pass to
    be READY under it."""

    name: str
    description: str
    simulated_only: bool
    stages: tuple[Stage, ...]


def _minimum(node: yamldoc.Node, sources: dict[str, str]) -> Minimum:
    f = node.mapping({"setting", "value", "unit", "source"}, {"measured", "tolerance"})
    setting = f["setting"].text()
    if setting.count(".") != 1:
        raise f["setting"].error(f"setting {setting!r} must be SECTION.KEY (load.burnin_s)")
    tol = float(f["tolerance"].value) if "tolerance" in f else 0.0
    if not 0 <= tol < 1:
        raise f["tolerance"].error("tolerance must be a fraction in [0, 1)")
    return Minimum(setting, f["value"].integer(), f["unit"].text(),
                   _cite(f["source"], sources),
                   f["measured"].choice(MEASURES) if "measured" in f else None, tol)


def _cite(node: yamldoc.Node, sources: dict[str, str]) -> str:
    name = node.text()
    if name not in sources:
        raise node.error(f"cites {name!r}, which the file's sources: do not define",
                         hint=f"define it under sources: ({', '.join(sources)})")
    return sources[name]


@cache
def profiles(path: Path | None = None) -> dict[str, Profile]:
    path = path or validators_dir() / "acceptance.yml"
    root = yamldoc.load(path).mapping({"schema", "sources", "profiles"})
    if root["schema"].text() != SCHEMA:
        raise root["schema"].error(f"expected schema {SCHEMA}")
    sources = {k: render_source(k, n) for k, n in root["sources"].items()}
    out: dict[str, Profile] = {}
    for name, node in root["profiles"].items():
        f = node.mapping({"description", "simulated_only", "stages"})
        stages = []
        for sname, snode in f["stages"].items():
            s = snode.mapping({"checks", "source"}, {"measured", "multi_gpu", "minimum"})
            stages.append(Stage(
                sname, tuple(s["checks"].text_list()), _cite(s["source"], sources),
                s["measured"].boolean() if "measured" in s else False,
                s["multi_gpu"].boolean() if "multi_gpu" in s else False,
                _minimum(s["minimum"], sources) if "minimum" in s else None))
        out[name] = Profile(name, f["description"].text(), f["simulated_only"].boolean(),
                            tuple(stages))
    if PRODUCTION not in out:
        raise root["profiles"].error(f"no {PRODUCTION!r} profile: every run that declares "
                                     "none is compared with it")
    return out


def profile(name: str) -> Profile:
    known = profiles()
    if name not in known:
        raise UnknownNameError(f"unknown acceptance profile {name!r}",
                               hint=f"validators/acceptance.yml defines: {', '.join(known)}")
    return known[name]


def _measure(kind: str, value: Any) -> float | None:
    """A measured minimum from a check's value; None where the value does not carry it."""
    if not isinstance(value, dict):
        return None
    if kind == "samples_per_gpu":
        gpus = value.get("peak_temp_c")
        samples = value.get("samples")
        if isinstance(samples, int | float) and isinstance(gpus, dict) and gpus:
            return float(samples) / len(gpus)
        return None
    got = value.get(kind)
    return float(got) if isinstance(got, int | float) and not isinstance(got, bool) else None


def _setting(plan: dict[str, Any], setting: str) -> Any:
    section, _, key = setting.partition(".")
    return ((plan.get("options") or {}).get(section) or {}).get(key)


def _soak_plateau(value: Any) -> str:
    """The soak's plateau criterion: every loaded GPU settled at a clock (the median of
    the second half of its samples); "" when it holds, else why not."""
    if not isinstance(value, dict):
        return "no plateau reported"
    gpus = set(value.get("peak_temp_c") or {})
    plateau = set(value.get("plateau_sm_mhz") or {})
    missing = sorted(gpus - plateau)
    return "" if gpus and not missing else (
        f"no clock plateau for GPU {', '.join(map(str, missing))}" if missing
        else "no GPU was loaded")


def _judge_stage(stage: Stage, plan: dict[str, Any], results: dict[str, Result],
                 gpus: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"stage": stage.name, "checks": list(stage.checks), "met": False,
                           "detail": "", "minimum": None, "measured": None}
    if stage.minimum:
        m = stage.minimum
        out["minimum"] = {"setting": m.setting, "value": m.value, "unit": m.unit,
                          "source": m.source, "set": _setting(plan, m.setting)}
    if stage.multi_gpu and gpus == 1:
        out.update(met=True, detail="not applicable: a one-GPU node has nothing to "
                                    "all-reduce with")
        return out
    absent = [c for c in stage.checks if c not in results]
    if absent:
        out["detail"] = f"{', '.join(absent)} did not run"
        return out
    bad = [f"{c} {results[c].verdict.name}" for c in stage.checks
           if results[c].verdict >= Verdict.FAIL]
    if bad:
        out["detail"] = "; ".join(bad)
        return out
    if stage.measured:
        unmeasured = [c for c in stage.checks if not _measured(results[c].value)]
        if unmeasured:
            out["detail"] = f"{', '.join(unmeasured)} reported no measurement: " + \
                "; ".join(results[c].summary for c in unmeasured)
            return out
    if stage.minimum:
        m = stage.minimum
        got = _setting(plan, m.setting)
        if not isinstance(got, int | float) or got < m.value:
            out["detail"] = (f"{m.setting} was {got if got is not None else 'not set'}, "
                             f"under the {m.value} {m.unit} acceptance requires")
            return out
        if m.measured:
            seen = _measure(m.measured, results[stage.checks[0]].value)
            out["measured"] = round(seen, 1) if seen is not None else None
            if seen is None:
                out["detail"] = f"{stage.checks[0]} reported no {m.measured}"
                return out
            floor = m.value * (1 - m.tolerance) if m.unit == "s" else m.value
            if seen < floor:
                out["detail"] = (f"measured {seen:g} {m.unit}, under the {m.value} {m.unit} "
                                 "acceptance requires")
                return out
    if stage.name == "soak":
        why = _soak_plateau(results[stage.checks[0]].value)
        if why:
            out["detail"] = why
            return out
    out.update(met=True, detail="measured" if stage.measured else "reported")
    return out


def _measured(value: Any) -> bool:
    """A check's value holds a measurement: not empty, not a "not measured" marker, not
    only null figures (a one-GPU all-reduce's busbw)."""
    if value is None or value in ({}, []):
        return False
    if isinstance(value, dict):
        if "not_measured" in value and len(value) == 1:
            return False
        figures = {k: v for k, v in value.items() if k not in ("nccl", "tool", "load")}
        return any(v is not None for v in figures.values())
    return True


def judge(profile_name: str | None, *, suite: str | None, plan: dict[str, Any] | None,
          results: list[Result], simulated: bool) -> dict[str, Any]:
    """What a certificate states of acceptance: accepted only when the suite declares a
    profile, the run did all of it (not --only), every stage is met, and a profile for
    simulated hardware judged simulated hardware."""
    declared = profile_name is not None
    prof = profile(profile_name or PRODUCTION)
    plan = plan or {}
    by_check = {r.check: r for r in results}
    gpus = (plan.get("spec") or {}).get("gpu_count")
    stages = [_judge_stage(s, plan, by_check, gpus if isinstance(gpus, int) else None)
              for s in prof.stages]
    why: list[str] = []
    if not declared:
        why.append(f"suite {suite} is not an acceptance suite")
    if not plan:
        why.append("the run recorded no plan for this host")
    elif plan.get("partial"):
        why.append("only some of the suite's checks ran (--only)")
    if prof.simulated_only and not simulated:
        why.append(f"the {prof.name} acceptance profile is for simulated hardware only: it "
                   "cannot certify real hardware")
    missing = [s["stage"] for s in stages if not s["met"]]
    why += [f"{s['stage']}: {s['detail']}" for s in stages if not s["met"]]
    durations = {s["stage"]: s["measured"] for s in stages
                 if s["stage"] in ("burnin", "soak")}
    return {"suite": suite, "profile": prof.name if declared else None,
            "simulated_only": prof.simulated_only, "accepted": not why,
            "partial": bool(plan.get("partial")),
            "stages": stages, "missing": missing, "reasons": why,
            "durations_s": durations}


__all__ = ["PRODUCTION", "Minimum", "Profile", "Stage", "judge", "profile", "profiles"]
