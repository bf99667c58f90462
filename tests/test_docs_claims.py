"""What the docs name exists: every repository path, module, command and flag that
README.md, docs/*.md and the READMEs beside the code name, and every repository path a
docstring or comment in the product points at.

A doc that names a file, module or flag that is gone misleads the reader exactly when it
matters (a newcomer following it); this test fails on the first such claim.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from support.env import REPO

DOC_FILES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"),
                    REPO / "validators" / "README.md", *(REPO / "roles").glob("*/README.md"),
                    *(REPO / "benchmarks").glob("*.md"), *(REPO / "tests").glob("*.md")])
CODE_FILES = sorted([*(REPO / "src").rglob("*.py"), *(REPO / "validators").rglob("*.py"),
                     *(REPO / "benchmarks").glob("*.py")])
ROOTS = ("src", "validators", "roles", "playbooks", "inventory", "stacks", "tests", "docs",
         "benchmarks", "awx", ".ci")
_ROOTS_RE = "|".join(re.escape(r) for r in ROOTS)
PATH = re.compile(rf"(?<![\w./~$-])((?:{_ROOTS_RE})/[\w./-]*[\w/])")
BARE_FILE = re.compile(r"`([\w-]+\.(?:py|yml|j2|sh))(?:::(\w+))?`")
MODULE = re.compile(r"(?<![\w./-])(nodecert(?:_node)?(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
# Names that look dotted but are files or identifiers, not modules (nodecert.pub, ...).
NOT_MODULES = {"pub", "key", "prom", "service", "timer", "yml", "json", "ini", "d", "conf",
               "log", "txt", "html", "intoto", "sock", "lock", "env", "cfg", "tar", "gz"}
# In code, site-relative paths (inventory/, stacks/ of an integrator's project) are common:
# only the repository's own code and docs trees are checked there.
CODE_ROOTS = ("src/", "validators/", "roles/", "playbooks/", "tests/", "docs/", "benchmarks/")
INLINE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


@functools.cache
def tracked_names() -> frozenset[str]:
    names: set[str] = set()
    for _root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") or d == ".ci"]
        names |= {*files, *dirs}
    return frozenset(names)


def path_claims(text: str) -> Iterator[str]:
    for m in PATH.finditer(text):
        p = m.group(1).rstrip("./")
        if not any(c in p for c in "<>*{}") and ".egg-info" not in p:
            yield p


def module_exists(dotted: str) -> str | None:
    """None when `dotted` names a module (or a name defined in one); else why not."""
    parts = dotted.split(".")
    if parts[1] in NOT_MODULES or parts[-1] in NOT_MODULES:
        return None
    root = REPO / ("src" if parts[0] == "nodecert" else "validators")
    base = root / parts[0]
    i = 1
    while i < len(parts) and ((base / parts[i]).is_dir() or (base / f"{parts[i]}.py").is_file()):
        base = base / parts[i]
        i += 1
    if i == 1:
        return f"no module {'.'.join(parts[:2])}"
    rest = parts[i:]
    if not rest:
        return None
    src = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if not src.is_file():
        return f"{'.'.join(parts[:i])} has no {rest[0]}"
    names: set[str] = set()
    for node in ast.parse(src.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return None if rest[0] in names else f"{'.'.join(parts[:i])} defines no {rest[0]}"


@functools.cache
def cli_roots() -> dict[str, click.Command]:
    from nodecert.cli import main
    from nodecert.cli.provision import provision
    return {"nodecert": main, "provision": provision}


@functools.cache
def all_flags(cmd: click.Command) -> frozenset[str]:
    flags = {o for p in cmd.params for o in [*p.opts, *p.secondary_opts]} | {"--help", "-h"}
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            flags |= all_flags(sub)
    return frozenset(flags)


def command_claims(text: str) -> Iterator[str]:
    """Each command line the text shows: fenced code lines and inline code spans."""
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            yield line.split(" # ", 1)[0].strip()
    for span in INLINE.findall(FENCE.sub("", text)):
        yield span.strip()


def check_command(line: str) -> str | None:
    """None when `line` is not a nodecert command or names only what exists."""
    words = line.replace("&&", " && ").replace(";", " ; ").replace("|", " | ").split()
    roots = cli_roots()
    starts = [i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in roots
              and (w in roots or w.endswith("bin/" + w.rsplit("/", 1)[-1]))]
    if not starts:
        return None
    name = words[starts[0]].rsplit("/", 1)[-1]
    cmd: click.Command = roots[name]
    path = [name]
    for w in words[starts[0] + 1:]:
        if w in ("&&", ";", "|", "\\"):
            break
        if w.startswith("-"):
            flag = w.split("=", 1)[0]
            if re.fullmatch(r"--?[a-zA-Z][\w-]*", flag) and flag not in all_flags(cmd):
                return f"`{' '.join(path)}` has no option {flag}"
            continue
        if isinstance(cmd, click.Group):
            if w in cmd.commands:
                cmd = cmd.commands[w]
                path.append(w)
            elif re.fullmatch(r"[a-z][a-z-]*", w) and not path[1:]:
                return f"`{' '.join(path)}` has no command {w}"
    return None


# "`name(...)` in `path`", "`name` (`path`)", "`path`'s `name`": the file exists, and must
# still hold what the sentence says it does (a function moved out of it makes the claim
# stale while the path check still passes).
_IN_PATH = r"`((?:src|validators|tests|benchmarks|roles|playbooks)/[\w./-]+\.(?:py|yml|j2))`"
_NAMED = r"`([A-Za-z_][\w.]*)(?:\([^`]*\))?`"
NAME_IN_PATH = (re.compile(_NAMED + r"[^`\n]{0,40}?\b(?:in|of|from|at)\s+" + _IN_PATH),
                re.compile(_NAMED + r"\s+\(" + _IN_PATH + r"\)"))
PATH_NAMES = (re.compile(_IN_PATH + r"(?:'s|:)\s+" + _NAMED),
              re.compile(_IN_PATH + r"\s+\(" + _NAMED + r"\)"))


def content_claims(text: str) -> Iterator[tuple[str, str]]:
    """(name, path) for every sentence that says a file holds a name."""
    for pat in NAME_IN_PATH:
        yield from ((m.group(1), m.group(2)) for m in pat.finditer(text))
    for pat in PATH_NAMES:
        yield from ((m.group(2), m.group(1)) for m in pat.finditer(text))


def claims(doc: Path) -> list[str]:
    return claims_in(doc.read_text(), str(doc.relative_to(REPO)))


def claims_in(text: str, rel: str) -> list[str]:
    """Every claim of `text` that names something that does not exist."""
    bad = [f"{rel}: names {p}, which does not exist" for p in sorted(set(path_claims(text)))
           if not (REPO / p).exists()]
    names = tracked_names()
    for fname, test in sorted(set(BARE_FILE.findall(text))):
        if fname not in names:
            bad.append(f"{rel}: names {fname}, which no file in the repository is")
        elif test and not any(re.search(rf"def {test}\b", p.read_text())
                              for p in REPO.glob(f"tests/{fname}")):
            bad.append(f"{rel}: names {fname}::{test}, which does not exist")
    for name, path in sorted(set(content_claims(text))):
        last = name.rsplit(".", 1)[-1]
        if (REPO / path).is_file() and not re.search(rf"\b{re.escape(last)}\b",
                                                      (REPO / path).read_text()):
            bad.append(f"{rel}: says {path} holds {name}, which it does not")
    for dotted in sorted(set(MODULE.findall(text))):
        why = module_exists(dotted)
        if why:
            bad.append(f"{rel}: names {dotted}: {why}")
    for line in command_claims(text):
        why = check_command(line)
        if why:
            bad.append(f"{rel}: {why} (in: {line[:80]})")
    return bad


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_what_a_doc_names_exists(doc: Path) -> None:
    assert claims(doc) == []


def test_what_a_docstring_or_comment_points_at_exists() -> None:
    bad = []
    for f in CODE_FILES:
        if "simhw" in f.parts:
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if not re.search(r'^\s*(#|"""|[A-Za-z`(].*)', line):
                continue
            for p in path_claims(line):
                if p.startswith(CODE_ROOTS) and not (REPO / p).exists():
                    bad.append(f"{f.relative_to(REPO)}:{n}: points at {p}, which is gone")
    assert bad == []


def test_a_claim_about_what_a_file_holds_is_checked_against_the_file() -> None:
    text = ("The parser (`power_limits(q_text)` in `validators/nodecert_node/checks/power.py`)"
            " and `src/nodecert/stack/gate.py`'s `judge_recipe`; `judge_power` in "
            "`validators/nodecert_node/checks/power.py` holds.")
    assert claims_in(text, "doc.md") == [
        "doc.md: says src/nodecert/stack/gate.py holds judge_recipe, which it does not"]


def test_a_claim_about_something_gone_is_caught() -> None:
    # The checker itself can fail: each kind of claim, pointing at something that is not.
    text = """See `src/nodecert/core/gone.py` and tests/test_nothing_here.py.
`test_bmc.py::test_no_such_test` and `no_such_module.py` prove it; the reader is
`nodecert.core.errors.NoSuchError`, beside `nodecert.nosuch`.

```sh
nodecert validate -i lab.ini --no-such-flag
nodecert frobnicate --json
provision -i lab.ini --stack r580-cuda13.0 --nonsense
```
"""
    found = claims_in(text, "planted.md")
    expected = ["src/nodecert/core/gone.py", "tests/test_nothing_here.py",
                "test_bmc.py::test_no_such_test", "no_such_module.py",
                "nodecert.core.errors.NoSuchError", "nodecert.nosuch", "option --no-such-flag",
                "command frobnicate", "option --nonsense"]
    for what in expected:
        assert any(what in f for f in found), (what, found)
    assert len(found) == len(expected), found
    good = """`src/nodecert/core/errors.py`, `nodecert.core.errors.NodecertError`,
`test_bmc.py::test_the_inventory_refuses_a_plain_text_bmc_password`, and
`nodecert validate -i lab.ini --suite standard --json` and `provision --check`."""
    assert claims_in(good, "good.md") == []
