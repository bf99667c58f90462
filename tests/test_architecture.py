"""The structure the code relies on: import graph, packages and layers, the contract, the
check registry.

The control side is a few packages in layers (LAYERS): a package imports only lower
layers, never a peer, never another package's private module. The control side imports
only the contract and the pure parsers from the node package; no module imports another
module's private names; no import cycle, lazy imports included.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nodecert.profiles import thresholds
from nodecert_node import registry
from support.env import REPO

SRC = REPO / "src" / "nodecert"
NODE = REPO / "validators" / "nodecert_node"
# Runs inside lab hosts as a standalone script (the hardware simulator), not a module
# of either side.
STANDALONE = {SRC / "lab" / "simhw" / "simhw.py",
              *(SRC / "lab" / "simhw" / "nodecert_simhw").glob("*.py")} - {
    SRC / "lab" / "simhw" / "nodecert_simhw" / "faults.py"}  # faults: both sides read it


def module_name(path: Path) -> str:
    root = SRC.parent if SRC in path.parents else NODE.parent
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path, me: str | None = None) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) for every import of nodecert / nodecert_node."""
    tree = ast.parse(path.read_text(), str(path))
    me = me or module_name(path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names
                    if a.name.split(".")[0] in ("nodecert", "nodecert_node")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = me.split(".")[: -node.level] if path.name != "__init__.py" else \
                    me.split(".")[: len(me.split(".")) - node.level + 1]
                base = ".".join([*pkg, *([base] if base else [])])
            if base.split(".")[0] in ("nodecert", "nodecert_node"):
                out.append((base, [a.name for a in node.names], node.lineno))
    return out


def modules() -> dict[str, Path]:
    files = [p for p in [*SRC.rglob("*.py"), *NODE.rglob("*.py")] if p not in STANDALONE]
    return {module_name(p): p for p in files}


def graph() -> dict[str, set[str]]:
    mods = modules()
    g: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for target, names, _ in project_imports(path):
            # "from pkg import mod" imports the submodule pkg.mod when there is one.
            subs = {f"{target}.{n}" for n in names if f"{target}.{n}" in mods}
            for t in subs or ({target} if target in mods else set()):
                if t != m:
                    g[m].add(t)
    return g


def find_cycles(g: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(g.get(m, ())):
            if state.get(t) == 1:
                cycles.append([*stack[stack.index(t):], t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2
    for m in sorted(g):
        if m not in state:
            visit(m)
    return cycles


def test_no_import_cycle() -> None:
    cycles = find_cycles(graph())
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The detector itself can fail: a lazy import back into a module is a cycle too.
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    lazy = ast.parse("def f():\n    from nodecert_node.runner import run_suite\n")
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(lazy))  # walked, not skipped


def test_control_side_imports_only_the_contract_and_parsers_from_the_node_package() -> None:
    # The contract and the pure parsers (stdlib functions of text) are shared, so a
    # multi-node job's output is read exactly as a node reads the same tool's; nothing
    # that runs checks on a node is imported by the control side.
    bad = [f"{p.relative_to(REPO)}:{line} imports {t}"
           for m, p in modules().items() if m.startswith("nodecert.")
           for t, names, line in project_imports(p)
           if t.startswith("nodecert_node") and t != "nodecert_node.contract"
           and not t.startswith("nodecert_node.parse")]
    assert bad == []


def test_node_package_never_imports_the_control_side() -> None:
    bad = [f"{p.relative_to(REPO)}:{line} imports {t}"
           for m, p in modules().items() if m.startswith("nodecert_node")
           for t, _, line in project_imports(p) if t.split(".")[0] == "nodecert"]
    assert bad == []


def test_no_module_imports_another_modules_private_names() -> None:
    bad = [f"{p.relative_to(REPO)}:{line} imports {t}.{n}"
           for m, p in modules().items()
           for t, names, line in project_imports(p) for n in names
           if n.startswith("_") and not n.startswith("__") and t != m]
    assert bad == []


# --- the control side's packages -----------------------------------------------------------

# Each package of the control side and its layer: a package imports only packages of a
# lower layer (and the node package's contract and parsers). Packages in one layer are
# peers and never import each other. The order is the architecture: read it bottom up.
LAYERS: dict[str, int] = {
    "core": 0,
    "stack": 1, "transport": 1, "profiles": 1,
    "inventory": 2,
    "runs": 3,
    "bmc": 4,
    "validation": 5, "firmware": 5,
    "certs": 6, "cluster": 6,
    # checks: each check's control-side declarations (found at run time by
    # nodecert.core.checks.discover, never imported by name from below)
    "fleet": 7, "provision": 7, "rack": 7, "checks": 7,
    "revalidate": 8,
    "lab": 9,
    "docgen": 10,
    "cli": 11,
    "__main__": 12,
}


def package_of(module: str) -> str | None:
    """The control-side package (or top-level module) a module belongs to."""
    parts = module.split(".")
    if parts[0] != "nodecert" or len(parts) < 2:
        return None
    return parts[1]


def layering_violations(g: dict[str, set[str]]) -> list[str]:
    """Every import that goes up or sideways between control-side packages, or into
    another package's private module (a module whose name starts with an underscore)."""
    bad = []
    for m, targets in g.items():
        src = package_of(m)
        if src is None:
            continue
        for t in sorted(targets):
            dst = package_of(t)
            if dst is None or dst == src:
                continue
            if dst not in LAYERS or src not in LAYERS:
                bad.append(f"{m} -> {t}: package not placed in a layer")
            elif LAYERS[dst] >= LAYERS[src]:
                bad.append(f"{m} -> {t}: nodecert.{src} (layer {LAYERS[src]}) may not "
                           f"import nodecert.{dst} (layer {LAYERS[dst]})")
            elif any(p.startswith("_") and not p.startswith("__") for p in t.split(".")[2:]):
                bad.append(f"{m} -> {t}: private module of another package")
    return bad


def test_control_side_top_level_is_a_few_packages() -> None:
    entries = sorted(p.name for p in SRC.iterdir()
                     if p.name != "__pycache__" and not p.name.endswith(".egg-info"))
    named = [e for e in entries if not e.startswith("__")]
    assert len(named) <= 19, named
    for e in named:  # every entry is a package or module placed in a layer
        assert e.removesuffix(".py") in LAYERS, f"src/nodecert/{e} is in no layer"


def test_every_package_says_what_it_owns_and_what_it_may_import() -> None:
    for pkg in sorted(p for p in SRC.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
        assert len(doc) > 120, f"{pkg.name}/__init__.py: say what the package owns"
        if LAYERS.get(pkg.name, 99) < LAYERS["lab"]:
            assert "import" in doc, f"{pkg.name}/__init__.py: say what it may import"


def test_packages_import_only_lower_layers() -> None:
    assert layering_violations(graph()) == []


def test_a_planted_upward_or_sideways_import_is_caught() -> None:
    g = graph()
    planted = {k: set(v) for k, v in g.items()}
    planted["nodecert.core.errors"].add("nodecert.cluster.run")        # upward
    planted["nodecert.certs.certify"].add("nodecert.cluster.run")      # sideways (peers)
    planted["nodecert.cli.common"].add("nodecert.runs._private")       # private module
    found = layering_violations(planted)
    assert any(f.startswith("nodecert.core.errors -> nodecert.cluster.run") for f in found)
    assert any(f.startswith("nodecert.certs.certify -> nodecert.cluster.run") for f in found)
    assert any("private module" in f for f in found)
    assert len(found) == 3, found


def test_a_planted_upward_import_in_a_source_file_is_caught(tmp_path: Path) -> None:
    # The whole path, from source text to finding: a lazy import inside a function too.
    planted = tmp_path / "errors.py"
    planted.write_text("def f():\n    from nodecert.provision.run import provision\n")
    edges = {t for t, _, _ in project_imports(planted, "nodecert.core.errors")}
    assert edges == {"nodecert.provision.run"}
    found = layering_violations({"nodecert.core.errors": edges})
    assert found and "may not import nodecert.provision" in found[0]


# --- the check contract: consumers ask the registries, never name a check -------------------

# Where no check is named: the certificate and its pages, and validation (the plan, the
# session, the echoes). They ask nodecert.core.checks (judge, plots, summary, echoes,
# after_bmc, roles) and the node's catalog (suites, needs).
NO_CHECK_NAMES = ("certs", "validation")


def check_ids() -> set[str]:
    from nodecert.bmc.judge import BMC_CHECKS
    from nodecert.core import checks
    from nodecert.profiles import catalog
    return {c.name for c in catalog.checks()} | set(checks.discover()) | set(BMC_CHECKS)


def check_names_written(path: Path, names: set[str]) -> list[str]:
    """Every string constant in path that is a check's id (or starts with one and a colon,
    the way a finding names its check)."""
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and (
                n.value in names or n.value.split(":", 1)[0] in names):
            out.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:"
                       f"{n.lineno} names {n.value!r}")
    return out


def test_no_check_is_named_in_the_certificate_or_validation_code() -> None:
    names = check_ids()
    assert {"load.burnin", "bmc.bios", "rack.sweep", "fabric.cabling"} <= names
    found = [f for pkg in NO_CHECK_NAMES for p in sorted((SRC / pkg).rglob("*.py"))
             for f in check_names_written(p, names)]
    assert found == []


def test_a_check_name_planted_in_the_certificate_code_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "certify.py"
    planted.write_text('def f(results):\n'
                       '    return [r for r in results if r["check"] == "load.burnin"]\n'
                       'NOTE = "rack.allreduce: not judged"\n')
    found = check_names_written(planted, check_ids())
    assert sorted(f.split(":", 1)[1] for f in found) == [
        "2 names 'load.burnin'", "3 names 'rack.allreduce: not judged'"]


# --- the GPU backend seam: only a vendor's backend runs its GPU tool ------------------------

NODE = REPO / "validators" / "nodecert_node"
# each vendor's GPU management tool, and the module that alone may run it
GPU_TOOLS = {"nvidia-smi": NODE / "gpu" / "nvidia.py"}


def vendor_tool_runs(path: Path) -> list[str]:
    """Every command line (a list or tuple of strings) in path that starts a vendor's GPU
    tool, or names one among a check's tools; every call of the old direct reader."""
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.List | ast.Tuple):
            for e in n.elts:
                if isinstance(e, ast.Constant) and e.value in GPU_TOOLS \
                        and GPU_TOOLS[e.value] != path:
                    out.append(f"{path.name}:{n.lineno} runs or declares {e.value}")
        if isinstance(n, ast.Name | ast.Attribute) and \
                (n.id if isinstance(n, ast.Name) else n.attr) == "nvidia_smi_q":
            out.append(f"{path.name}:{n.lineno} reads GPUs around the backend")
    return out


def test_only_the_gpu_backend_runs_the_vendors_gpu_tool() -> None:
    found = [f for p in sorted(NODE.rglob("*.py")) for f in vendor_tool_runs(p)]
    assert found == []


def test_a_vendor_tool_run_planted_in_a_check_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "health.py"
    planted.write_text('def f(ctx):\n'
                       '    out = run(["nvidia-smi", "-q"], timeout=ctx.timeout)\n'
                       '    return nvidia_smi_q(ctx)\n'
                       'TOOLS = ("lspci", "nvidia-smi")\n')
    assert sorted(vendor_tool_runs(planted)) == [
        "health.py:2 runs or declares nvidia-smi", "health.py:3 reads GPUs around the backend",
        "health.py:4 runs or declares nvidia-smi"]


# --- the runner seam: only the SSH runner speaks SSH --------------------------------------

# The SSH runner's modules; every other module of validation reaches nodes through the
# Runner it is given (validation/runner.py). An Endpoint (where a host is) is data.
SSH_RUNNER = {"session.py", "nodecmd.py"}


def ssh_uses(path: Path) -> list[str]:
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "paramiko"
                                             for a in n.names):
            out.append(f"{path.name}:{n.lineno} imports paramiko")
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "paramiko":
            out.append(f"{path.name}:{n.lineno} imports paramiko")
        if isinstance(n, ast.ImportFrom) and n.module == "nodecert.transport.ssh":
            used = sorted(a.name for a in n.names if a.name != "Endpoint")
            if used:
                out.append(f"{path.name}:{n.lineno} uses SSH ({', '.join(used)})")
    return out


def test_only_the_ssh_runner_speaks_ssh_in_validation() -> None:
    found = [f for p in sorted((SRC / "validation").glob("*.py")) if p.name not in SSH_RUNNER
             for f in ssh_uses(p)]
    # collecting a node's own run reads its history through the same runner
    found += ssh_uses(SRC / "revalidate" / "collect.py")
    assert found == []


def test_an_ssh_call_planted_outside_the_runner_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "run.py"
    planted.write_text("import paramiko\n"
                       "from nodecert.transport.ssh import Endpoint, connect\n")
    assert ssh_uses(planted) == ["run.py:1 imports paramiko",
                                 "run.py:2 uses SSH (connect)"]


def test_long_modules_say_why() -> None:
    """A module past ~400 lines says at its top why it must be that long."""
    long = [p for p in modules().values() if len(p.read_text().splitlines()) > 420]
    unexplained = [str(p.relative_to(REPO)) for p in long
                   if "long because" not in p.read_text()[:3000].lower()]
    assert unexplained == []


LONG_FUNCTION_LINES = 60
# A ratchet: the functions past LONG_FUNCTION_LINES (simulators' output tables, the
# lab's Redfish trees, a few parsers) are at most this many; lower it when one is split.
LONG_FUNCTIONS_MAX = 15


def long_functions(paths: list[Path]) -> list[str]:
    """path:line name (lines) of each function longer than LONG_FUNCTION_LINES."""
    out = []
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > LONG_FUNCTION_LINES:
                    out.append(f"{p.name}:{node.lineno} {node.name} ({n})")
    return out


def test_long_functions_are_few() -> None:
    paths = sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "validators").rglob("*.py"))
    long = long_functions(paths)
    assert len(long) <= LONG_FUNCTIONS_MAX, long


def test_a_planted_long_function_is_counted(tmp_path: Path) -> None:
    planted = tmp_path / "big.py"
    planted.write_text("def big() -> int:\n" + "    x = 1\n" * LONG_FUNCTION_LINES
                       + "    return x\n\n\ndef small() -> None:\n    pass\n")
    assert long_functions([planted]) == [f"big.py:1 big ({LONG_FUNCTION_LINES + 2})"]


def helper_imports_outside_support(root: Path) -> list[str]:
    """Lines that take a helper from conftest or from another test file: helpers that more
    than one file uses live in tests/support."""
    return [f"{p.relative_to(root)}:{n}" for p in sorted((root / "tests").rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.match(r"\s*(from (conftest|test_\w+) import|import (conftest|test_\w+))",
                        line)]


def test_tests_take_helpers_from_support_never_from_conftest_or_each_other(
        tmp_path: Path) -> None:
    assert helper_imports_outside_support(REPO) == []
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_b.py").write_text("x = 1\n    from test_a import helper\n")
    assert helper_imports_outside_support(tmp_path) == ["tests/test_b.py:2"]


# --- the check registry ---------------------------------------------------------------------

def test_every_check_lives_in_the_module_named_after_its_prefix() -> None:
    specs = registry.discover()
    assert len(specs) >= 14
    for name, spec in specs.items():
        assert spec.module == f"nodecert_node.checks.{name.split('.')[0]}", name
        assert spec.description and spec.suites, name


def test_declaring_a_check_in_the_wrong_module_is_refused() -> None:
    def fn(ctx: object) -> object:
        raise AssertionError("never run")
    fn.__module__ = "nodecert_node.checks.health"
    with pytest.raises(RuntimeError, match=r"belongs in nodecert_node\.checks\.storage"):
        registry.check("storage.other", description="x", order=1)(fn)  # type: ignore[arg-type]
    assert "storage.other" not in registry.REGISTRY


def test_suites_come_from_the_declarations_in_order() -> None:
    s = thresholds.suites()
    platform = ("platform.pcie_acs", "platform.iommu", "platform.cpu_governor",
                "platform.numa_balancing", "platform.gpudirect")
    assert s["quick"].checks == ("hardware.inventory", "hardware.pcie", "hardware.topology",
                                 "domain.fabric", "domain.imex", "net.ib", "net.roce",
                                 "health.gpu", "health.xid",
                                 "power.limit", *platform, "attestation.gpu",
                                 "stack.conformance", "stack.advisories",
                                 "container.gpu_smoke", "storage.fio")
    assert s["standard"].checks == s["full"].checks == (
        "hardware.inventory", "hardware.pcie", "hardware.topology", "domain.fabric",
        "domain.imex", "net.ib", "net.roce", "health.gpu",
        "health.xid", "power.limit", *platform, "attestation.gpu", "stack.conformance",
        "stack.advisories",
        "stack.framework_smoke",
        "container.gpu_smoke", "storage.fio", "storage.shared", "fabric.nccl_allreduce",
        "fabric.bandwidth", "dcgm.diag", "load.burnin", "load.thermal_soak", "load.scaling")
    specs = registry.discover()
    for name, suite in s.items():
        assert set(suite.checks) == {c for c, x in specs.items() if name in x.suites}, name


def test_node_lists_its_checks_as_json() -> None:
    out = subprocess.run([sys.executable, "-m", "nodecert_node", "list", "--json"],
                         cwd=REPO / "validators", capture_output=True, text=True, timeout=60,
                         check=True)
    listed = {c["name"]: c for c in json.loads(out.stdout)}
    assert listed["dcgm.diag"]["module"] == "nodecert_node.checks.dcgm"
    assert listed["storage.fio"]["tools"] == ["fio"]
    assert set(listed) == set(registry.discover())


def test_one_naming_scheme_for_gpu_models() -> None:
    """The gate's model names key the threshold profiles and the lab's hardware."""
    from nodecert.lab.hardware import load_profiles
    from nodecert.stack.compat import default_matrix
    gate = set(default_matrix().gpus)
    profiles = {p.stem for p in thresholds.profiles_dir().glob("*.yml")} - {"common"}
    assert profiles <= gate, profiles - gate
    lab_models = {p["gpu_model"] for p in load_profiles().values()}
    assert lab_models <= profiles, lab_models - profiles


# The run directory's file names, spelled only by nodecert.runs: every other module
# reaches a run's files through RunDir and reads them through runs.records.
RUN_FILE_NAMES = re.compile(
    r'"(?:results|validate|provision|suite|extravars)\.json"|/ "(?:inputs|reports|ansible)"'
    r'|\}\.intoto\.dsse\.json|plan-\{|glob\(f?"\*/')


def run_path_spellings(files: dict[str, str]) -> list[str]:
    """`module:line` for each line outside nodecert.runs that spells a run file's path."""
    return [f"{name}:{n}: {line.strip()}" for name, text in files.items()
            if not name.startswith("nodecert.runs.")
            for n, line in enumerate(text.splitlines(), 1)
            if RUN_FILE_NAMES.search(line.split("#", 1)[0])]


def test_only_the_runs_package_spells_a_run_directorys_paths() -> None:
    files = {m: p.read_text() for m, p in modules().items()
             if m.startswith("nodecert.") and not m.startswith("nodecert.lab.")}
    assert run_path_spellings(files) == []


def test_a_run_path_spelled_by_hand_is_caught() -> None:
    planted = {
        "nodecert.certs.x": 'data = json.loads((run_dir / "results.json").read_text())',
        "nodecert.revalidate.y": 'for p in runs_dir.glob(f"*/{host}/results.json"):',
        "nodecert.bmc.z": 'cert = d / "reports" / f"{host}.intoto.dsse.json"',
        "nodecert.runs.layout": 'return self.path / "results.json"',  # the owner may
    }
    assert [s.split(":")[0] for s in run_path_spellings(planted)] == [
        "nodecert.certs.x", "nodecert.revalidate.y", "nodecert.bmc.z"]


# --- typed runs ------------------------------------------------------------------------------

_RAW_RECORD = re.compile(r"""\.data\s*(?:\.get\(\s*|\[\s*)["'](results|verdict|check)["']""")


def lines_matching(pattern: re.Pattern[str], files: dict[str, Path],
                   owner: str = "") -> list[str]:
    """`file:line` of each line matching `pattern`, outside the module that owns it."""
    return [f"{p.name}:{n}" for name, p in sorted(files.items()) if name != owner
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if pattern.search(line)]


def raw_record_reads(files: dict[str, Path]) -> list[str]:
    """Lines that read a saved record's verdict or results from its JSON instead of
    through the typed readers (runs/records.py)."""
    return lines_matching(_RAW_RECORD, files, owner="nodecert.runs.records")


def test_runs_are_read_typed(tmp_path: Path) -> None:
    assert raw_record_reads(modules()) == []
    planted = tmp_path / "planted.py"
    planted.write_text("ok = rec.data['verdict'] == 'PASS'\n"
                       "bad = [r for r in rec.data.get(\"results\") or []]\n")
    assert raw_record_reads({"nodecert.x": planted}) == ["planted.py:1", "planted.py:2"]


_UNTYPED_RUN = re.compile(r"->\s*tuple\[\s*Path\s*,\s*dict\[")


def untyped_run_returns(files: dict[str, Path]) -> list[str]:
    """Functions that hand back a run as (directory, JSON dict) instead of its record."""
    return lines_matching(_UNTYPED_RUN, files)


def test_a_run_is_handed_back_as_its_typed_record(tmp_path: Path) -> None:
    assert untyped_run_returns(modules()) == []
    planted = tmp_path / "planted.py"
    planted.write_text("def rack_validate(r: Req) -> tuple[Path, dict[str, Any]]:\n"
                       "    ...\n")
    assert untyped_run_returns({"nodecert.x": planted}) == ["planted.py:1"]
