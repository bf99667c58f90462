"""Validation thresholds and suites: data files under validators/, resolved per host.

Order of precedence (later wins): validators/profiles/common.yml, the GPU model's
profile, the inventory's nodecert_thresholds, the CLI's --threshold. Every value
carries its origin and cited source into the plan, so each Result says which
limit it was judged against and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from nodecert.core import yamldoc
from nodecert.core.errors import InventoryError, ManifestError, UnknownNameError
from nodecert.profiles import acceptance
from nodecert.profiles.catalog import suite_checks
from nodecert.profiles.datafiles import render_source, validators_dir
from nodecert_node.contract import OPS


def profiles_dir() -> Path:
    return validators_dir() / "profiles"


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    thresholds: dict[str, dict[str, Any]]
    # Keys no published or recorded figure supports for this model, with the profile's
    # statement of why; the check that would judge the key WARNs with that statement.
    unpublished: dict[str, str] = field(default_factory=dict)


def _read_profile(path: Path, name: str) -> Profile:
    root = yamldoc.load(path).mapping({"schema", "thresholds"},
                                      {"sources", "gpu_model", "unpublished"})
    if root["schema"].text() != "nodecert.validator-profile/v1":
        raise root["schema"].error("expected schema nodecert.validator-profile/v1")
    sources = ({k: render_source(k, n) for k, n in root["sources"].items()}
               if "sources" in root else {})
    out: dict[str, dict[str, Any]] = {}
    for key, node in root["thresholds"].items():
        f = node.mapping({"value", "op", "source"}, {"unit"})
        op = f["op"].choice(OPS)
        src = f["source"].text()
        cited, _, detail = src.partition(" ")
        if cited not in sources:
            raise f["source"].error(f"cites {cited!r}, which the file's sources: do not define",
                                    hint=f"define it under sources: ({', '.join(sources)})")
        out[key] = {"value": f["value"].value, "op": op,
                    "unit": f["unit"].text() if "unit" in f else "",
                    "origin": f"profile {name} ({path.parent.name}/{path.name})",
                    "source": f"{sources[cited]}{' ' + detail if detail else ''}"}
    gaps: dict[str, str] = {}
    for key, node in (root["unpublished"].items() if "unpublished" in root else []):
        if key in out:
            raise node.error(f"{key} is both a threshold and unpublished",
                             hint="a key is either judged (thresholds:) or stated open "
                                  "(unpublished:), not both")
        statement = node.text()
        if len(statement) < 20:
            raise node.error(f"unpublished {key} needs a statement of why no figure exists")
        gaps[key] = statement
    return Profile(name, path, out, gaps)


@cache
def load_profile(gpu_model: str) -> Profile:
    path = profiles_dir() / f"{gpu_model}.yml"
    if not path.is_file():
        known = sorted(p.stem for p in profiles_dir().glob("*.yml") if p.stem != "common")
        raise UnknownNameError(f"no validation profile for GPU model {gpu_model!r}",
                               hint=f"add {path} (profiles exist for: {', '.join(known)})")
    return _read_profile(path, gpu_model)


def has_profile(gpu_model: str) -> bool:
    return (profiles_dir() / f"{gpu_model}.yml").is_file()


@cache
def common_profile() -> Profile:
    return _read_profile(profiles_dir() / "common.yml", "common")


def known_keys() -> set[str]:
    keys = set(common_profile().thresholds)
    for p in profiles_dir().glob("*.yml"):
        if p.stem != "common":
            keys |= set(load_profile(p.stem).thresholds)
    return keys


def gaps(gpu_model: str, resolved: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The model profile's unpublished keys that nothing else (inventory, CLI) has set."""
    if not has_profile(gpu_model):
        return {}
    return {k: v for k, v in load_profile(gpu_model).unpublished.items() if k not in resolved}


def resolve(gpu_model: str, *, inventory: dict[str, Any] | None = None,
            cli: dict[str, Any] | None = None, host: str = "") -> dict[str, dict[str, Any]]:
    """The thresholds for one host, each with value, op, unit, origin and source."""
    out = {k: dict(v) for k, v in common_profile().thresholds.items()}
    # A model the gate knows but no profile covers is validated with the common
    # thresholds; the plan says so and hardware.inventory WARNs (never a silent pass).
    if has_profile(gpu_model):
        out.update({k: dict(v) for k, v in load_profile(gpu_model).thresholds.items()})
    keys = known_keys()
    for origin, overrides in ((f"inventory nodecert_thresholds ({host})", inventory or {}),
                              ("command line --threshold", cli or {})):
        for key, value in overrides.items():
            if key not in keys:
                raise InventoryError(f"unknown threshold {key!r} in {origin}",
                                     hint=f"known thresholds: {', '.join(sorted(keys))}")
            base = out.get(key, {"op": ">=", "unit": ""})
            out[key] = {**base, "value": value, "origin": origin,
                        "source": f"set by the operator in the {origin.split(' (')[0]}"}
    return out


@dataclass(frozen=True)
class Suite:
    """A validation suite (validators/suites.yml): which checks run, how long each may
    take, their storage, fabric and load settings and its acceptance profile."""

    name: str
    description: str
    checks: tuple[str, ...]
    check_timeout_s: int
    storage: dict[str, Any]
    fabric: dict[str, Any]
    load: dict[str, Any]
    # The acceptance profile its runs are judged by (validators/acceptance.yml); None:
    # its runs give health records, never READY.
    acceptance: str | None = None


@cache
def suites(path: Path | None = None) -> dict[str, Suite]:
    """The suites of validators/suites.yml, or of a site's own file (--suite-file, the
    same schema)."""
    path = path or validators_dir() / "suites.yml"
    root = yamldoc.load(path).mapping({"schema", "suites"})
    if root["schema"].text() != "nodecert.suites/v1":
        raise root["schema"].error("expected schema nodecert.suites/v1")
    out = {}
    for name, node in root["suites"].items():
        f = node.mapping({"description", "check_timeout_s", "storage"},
                         {"checks", "fabric", "load", "acceptance"})
        storage = f["storage"].mapping(set(), {"size_mb", "runtime_s", "checkpoint_mb",
                                               "iodepth", "numjobs", "ioengine"})
        fabric = f["fabric"].mapping(set(), {"nccl_max_size", "nccl_iters", "timeout_s",
                                             "dcgm_level", "dcgm_timeout_s",
                                             "dcgm_skipped", "counter_window_s"}) \
            if "fabric" in f else {}
        if "dcgm_skipped" in fabric and fabric["dcgm_skipped"].text() not in DCGM_SKIPPED:
            raise fabric["dcgm_skipped"].error(
                f"dcgm_skipped must be one of {', '.join(DCGM_SKIPPED)}")
        # The checks a suite runs are those that declare it (the node's registry), in
        # their declared order; a suite may list its checks instead.
        listed = tuple(f["checks"].text_list()) if "checks" in f else suite_checks(name)
        if not listed:
            raise node.error(f"suite {name!r} has no checks: no check declares it",
                             hint="list its checks under checks:, or declare the suite in "
                                  "the checks' modules")
        out[name] = Suite(name, f["description"].text(), listed,
                          f["check_timeout_s"].integer(),
                          {k: (n.text() if k == "ioengine" else n.integer())
                           for k, n in storage.items()},
                          {k: (n.text() if k in ("nccl_max_size", "dcgm_skipped")
                               else n.integer()) for k, n in fabric.items()},
                          _load_options(f["load"]) if "load" in f else {},
                          _acceptance(f["acceptance"]) if "acceptance" in f else None)
    return out


def _acceptance(node: yamldoc.Node) -> str:
    name = node.text()
    known = acceptance.profiles()
    if name not in known:
        raise node.error(f"unknown acceptance profile {name!r}",
                         hint=f"validators/acceptance.yml defines: {', '.join(known)}")
    return name


LOAD_ENGINES = ("auto", "torch", "gpu_burn")
GEMM_DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32")
# What a DCGM test that was skipped (not measured) makes of dcgm.diag.
DCGM_SKIPPED = ("warn", "error")


def _load_options(node: yamldoc.Node) -> dict[str, Any]:
    m = node.mapping(set(), {"burnin_s", "soak_s", "engine", "dtype", "gemm_size",
                             "smoke_steps", "report_s", "scaling_steps", "scaling_warmup",
                             "scaling_timeout_s"})
    out: dict[str, Any] = {}
    for k, n in m.items():
        if k in ("engine", "dtype"):
            allowed = LOAD_ENGINES if k == "engine" else GEMM_DTYPES
            if n.text() not in allowed:
                raise n.error(f"{k} must be one of {', '.join(allowed)}")
            out[k] = n.text()
        else:
            out[k] = n.integer()
    return out


def suite(name: str, path: Path | None = None) -> Suite:
    s = suites(path.resolve() if path else None)
    if name not in s:
        raise UnknownNameError(f"unknown suite {name!r}" + (f" in {path}" if path else ""),
                               hint=f"use one of: {', '.join(s)}")
    return s[name]


def parse_cli_thresholds(items: tuple[str, ...]) -> dict[str, Any]:
    """--threshold KEY=VALUE (VALUE read as YAML: 3000, 0.9, [a, b])."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ManifestError(f"--threshold {item!r}: expected KEY=VALUE",
                                hint="e.g. --threshold storage.seq_read_mbps_min=3000")
        out[key.strip()] = yaml.safe_load(raw)
    return out


# What `--set SECTION.KEY=VALUE` may change, and how the value is read (as in suites.yml).
SUITE_SETTINGS: dict[str, dict[str, Any]] = {
    "storage": {"size_mb": int, "runtime_s": int, "checkpoint_mb": int, "iodepth": int,
                "numjobs": int, "ioengine": str},
    "fabric": {"nccl_max_size": str, "nccl_iters": int, "timeout_s": int, "dcgm_level": int,
               "dcgm_timeout_s": int, "dcgm_skipped": DCGM_SKIPPED, "counter_window_s": int},
    "load": {"burnin_s": int, "soak_s": int, "engine": LOAD_ENGINES, "dtype": GEMM_DTYPES,
             "gemm_size": int, "smoke_steps": int, "report_s": int, "scaling_steps": int,
             "scaling_warmup": int, "scaling_timeout_s": int},
}


def parse_suite_settings(items: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """--set load.burnin_s=300 --set storage.size_mb=1024 -> {"load": {...}, ...}.

    Every key and value is checked here, before anything runs; the plan each host gets
    (recorded in the run's inputs, signed into its certificate) carries them."""
    out: dict[str, dict[str, Any]] = {}
    known = ", ".join(f"{sec}.{k}" for sec, keys in SUITE_SETTINGS.items() for k in keys)
    for item in items:
        key, sep, raw = item.partition("=")
        section, _, name = key.strip().partition(".")
        kind = SUITE_SETTINGS.get(section, {}).get(name)
        if not sep or kind is None:
            raise ManifestError(f"--set {item!r}: unknown suite setting {key.strip()!r}",
                                hint=f"settings: {known}")
        value: Any = raw.strip()
        if kind is int:
            if not value.isdigit() or int(value) < 1:
                raise ManifestError(f"--set {item!r}: {key.strip()} takes a positive "
                                    "whole number")
            value = int(value)
        elif isinstance(kind, tuple) and value not in kind:
            raise ManifestError(f"--set {item!r}: {key.strip()} must be one of "
                                f"{', '.join(kind)}")
        out.setdefault(section, {})[name] = value
    return out


__all__ = ["SUITE_SETTINGS", "Profile", "Suite", "has_profile", "known_keys", "load_profile",
           "parse_cli_thresholds", "parse_suite_settings", "resolve", "suite", "suites"]
