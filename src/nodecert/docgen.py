"""Tables in README.md and docs/ generated from the code and data they describe.

Each table sits between `<!-- BEGIN GENERATED: NAME -->` and `<!-- END GENERATED: NAME -->`
in README.md or a docs/ file; `python -m nodecert.docgen` rewrites them, and a test fails
when a doc no longer matches (run that command, review, commit).

The check table comes from the node's registry (nodecert.profiles.catalog).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from nodecert.core.paths import data_root
from nodecert.inventory.rack import kinds as rack_kinds
from nodecert.inventory.variables import ORDER, VARIABLES
from nodecert.lab.hardware import FAULT_KINDS
from nodecert.profiles import catalog, thresholds
from nodecert.stack.compat import default_matrix
from nodecert.stack.manifest import list_stacks

BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[a-z_]+) -->\n)(?P<body>.*?)"
                   r"(<!-- END GENERATED: (?P=name) -->)", re.S)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def checks_table() -> str:
    rows = [[f"`{c.name}`", ", ".join(c.suites), ", ".join(c.tools) or "-", c.description,
             f"`{c.module}`"] for c in catalog.checks()]
    return _table(["check", "suites", "tools", "judges", "module"], rows)


def thresholds_table() -> str:
    rows: list[list[object]] = []
    profiles = [thresholds.common_profile()] + [
        thresholds.load_profile(p.stem) for p in sorted(thresholds.profiles_dir().glob("*.yml"))
        if p.stem != "common"]
    for prof in profiles:
        for key, t in sorted(prof.thresholds.items()):
            value = " / ".join(map(str, t["value"])) if isinstance(t["value"], list) \
                else t["value"]
            rows.append([prof.name, f"`{key}`", f"{t['op']} {value} {t['unit']}".strip(),
                         t["source"]])
        for key, why in sorted(prof.unpublished.items()):
            rows.append([prof.name, f"`{key}`", "not judged (WARN)", why])
    return _table(["profile", "key", "limit", "source"], rows)


def faults_table() -> str:
    rows = [[f"`{kind}`", ", ".join(sorted(k.required)) or "-",
             ", ".join(sorted(k.optional)) or "-", k.effect, f"`{k.caught_by}`"]
            for kind, k in FAULT_KINDS.items()]
    return _table(["kind", "required", "optional", "effect", "must fail"], rows)


def inventory_table() -> str:
    rows = [[f"`{v.name}`", "yes" if v.required else "", v.kind,
             "" if v.default is None else str(v.default).lower() if isinstance(v.default, bool)
             else v.default, v.read_by, v.doc
             + ("" if v.page == "docs/inventory.md" else f" ({v.page.removeprefix('docs/')})")]
            for v in VARIABLES]
    return _table(["variable", "required", "type", "default", "read by", "meaning"], rows)


def order_spec() -> str:
    """The order spec's variables, required first, as one line of prose."""
    req = [f"`{v.name}`" for v in ORDER if v.required]
    opt = [f"`{v.name}`" for v in ORDER if not v.required]
    return ", ".join(req) + ", optional " + ", ".join(opt) + "\n"


def roles_table() -> str:
    rows: list[list[object]] = []
    for role in sorted((data_root() / "roles").iterdir()):
        spec_file = role / "meta" / "argument_specs.yml"
        if not spec_file.is_file():
            continue
        specs = yaml.safe_load(spec_file.read_text())["argument_specs"]["main"]
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        for name, opt in sorted((specs.get("options") or {}).items()):
            default = json.dumps(defaults.get(name)) if name in defaults else "(required)"
            rows.append([f"`{role.name}`", f"`{name}`", f"`{default}`",
                         opt.get("description", "")])
    return _table(["role", "variable", "default", "description"], rows)


def stacks_table() -> str:
    """The shipped stacks, from their manifests and the driver branches' sourced facts."""
    matrix = default_matrix()
    rows: list[list[object]] = []
    for s in list_stacks():
        branch = matrix.driver_branches.get(s.driver_branch)
        life = "" if branch is None else (
            f" ({branch.designation}, EOL passed)" if branch.eol_past or branch.eol is None
            else f" ({branch.designation} to {branch.eol:%Y-%m})")
        fw = ", ".join(x for x in (
            f"torch {s.framework.pytorch}" if s.framework.pytorch else "",
            f"TF {s.framework.tensorflow}" if s.framework.tensorflow else "") if x) or "-"
        unconfirmed = {o: sum(not p.confirmed for p in pins.packages)
                       for o, pins in s.os.items()}
        oses = ", ".join(o + (f" ({n} unconfirmed)" if n else "")
                         for o, n in unconfirmed.items())
        rows.append([f"`{s.name}`", s.status, f"{s.driver} {s.kernel_modules}{life}", s.cuda,
                     s.cudnn, s.nccl, s.dcgm, fw, oses])
    return _table(["stack", "status", "driver", "CUDA", "cuDNN", "NCCL", "DCGM", "framework",
                   "OS (pins not seen published)"], rows)


def gpu_models_table() -> str:
    """Every GPU model the gate knows, and whether it carries a threshold profile."""
    rows = [[f"`{m.key}`", m.name, m.architecture, f"{m.memory_gb} GB",
             "yes" if m.nvswitch else "-", m.open_modules,
             f"`validators/profiles/{m.key}.yml`" if thresholds.has_profile(m.key) else "-"]
            for m in default_matrix().gpus.values()]
    return _table(["model", "name", "architecture", "memory", "NVSwitch", "open modules",
                   "threshold profile"], rows)


def rack_kinds_table() -> str:
    """Every rack kind an inventory may name (src/nodecert/inventory/rack-kinds.yml)."""
    rows = [[f"`{k.name}`", k.trays_max, k.gpus_per_tray, k.trays_max * k.gpus_per_tray,
             ", ".join(k.gpu_models), k.switch_trays_max, "yes" if k.imex else "no"]
            for k in rack_kinds().values()]
    return _table(["kind", "compute trays", "GPUs per tray", "GPUs", "GPU models",
                   "switch trays", "IMEX by default"], rows)


GENERATORS: dict[str, Callable[[], str]] = {
    "checks": checks_table, "thresholds": thresholds_table, "faults": faults_table,
    "inventory": inventory_table, "order_spec": order_spec, "roles": roles_table,
    "stacks": stacks_table, "gpu_models": gpu_models_table, "rack_kinds": rack_kinds_table,
}


def render(text: str) -> str:
    """The doc with every generated block filled in anew."""
    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise KeyError(f"unknown generated block {name!r}")
        return m.group(1) + GENERATORS[name]() + m.group(4)
    return BLOCK.sub(fill, text)


def docs_dir() -> Path:
    return data_root() / "docs"


def generated_docs() -> list[Path]:
    """README.md and every docs/ file: the documents that may hold generated blocks."""
    return [data_root() / "README.md", *sorted(docs_dir().glob("*.md"))]


def main() -> int:
    changed = []
    for path in generated_docs():
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            changed.append(path.name)
    print("updated: " + (", ".join(changed) or "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
