"""Role hygiene: documented interface in sync, no blanket ignore_errors, commands judged."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.env import REPO

ROLES = sorted(p for p in (REPO / "roles").iterdir() if p.is_dir())
PUBLIC = [r for r in ROLES if r.name != "nodecert_common"]


def _defaults(role: Path) -> dict[str, Any]:
    return yaml.safe_load((role / "defaults/main.yml").read_text()) or {}


def _tasks(role: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted((role / "tasks").glob("*.yml")) + sorted((role / "handlers").glob("*.yml")):
        out.extend(yaml.safe_load(f.read_text()) or [])
    return out


def test_every_role_is_played_and_every_played_role_exists() -> None:
    """No orphan role and no play naming a role that is not there."""
    played: set[str] = set()
    for play_file in (REPO / "playbooks").glob("*.yml"):
        text = play_file.read_text()
        played |= set(re.findall(r"role: ([a-z0-9_]+)", text))
        played |= set(re.findall(r"name: ([a-z0-9_]+)\n\s+tasks_from", text))
    assert played == {r.name for r in ROLES}


@pytest.mark.parametrize("role", PUBLIC, ids=lambda r: r.name)
def test_readme_table_matches_defaults(role: Path) -> None:
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", (role / "README.md").read_text(),
                                re.MULTILINE))
    assert documented == set(_defaults(role)), f"{role.name}: README table vs defaults"


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_defaults_are_prefixed_documented_and_specified(role: Path) -> None:
    defaults = _defaults(role)
    text = (role / "defaults/main.yml").read_text()
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    specified = {k for entry in specs.values() for k in entry.get("options", {})}
    for var in defaults:
        assert var.startswith(f"{role.name}_"), f"{var} lacks the role prefix"
        assert re.search(rf"#.*\n(#.*\n)*{var}:", text), f"{var} has no comment above it"
        assert var in specified, f"{var} missing from meta/argument_specs.yml"


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_tasks_are_named_judged_and_never_blanket_ignored(role: Path) -> None:
    for task in _tasks(role):
        assert task.get("name"), f"{role.name}: unnamed task {task}"
        ignore = task.get("ignore_errors")
        assert ignore in (None, "{{ ansible_check_mode }}"), f"{task['name']}: ignore_errors"
        module = next((k for k in task if k.startswith("ansible.builtin.")), "")
        if module in ("ansible.builtin.command", "ansible.builtin.shell"):
            assert "changed_when" in task, f"{role.name}: {task['name']} has no changed_when"
            args = task.get(module)
            guarded = isinstance(args, dict) and ("removes" in args or "creates" in args)
            assert "failed_when" in task or guarded, f"{task['name']} has no failed_when"


def test_every_entry_play_starts_with_preflight() -> None:
    for play in sorted((REPO / "playbooks").glob("*.yml")):
        if play.name == "preflight.yml":
            continue
        first = yaml.safe_load(play.read_text())[0]
        assert first.get("ansible.builtin.import_playbook") == "preflight.yml", play.name


def _render(template: str, variables: dict[str, object]) -> str:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    text = (REPO / "roles" / "validators" / "templates" / template).read_text()
    return str(Templar(loader=DataLoader(), variables={"ansible_managed": "managed",
                                                       **variables})
               .template(trust_as_template(text)))


HOSTILE = 'x" --force $HOME %h \\ o\'brien'


def test_operator_values_stay_one_word_in_the_units_command_line(tmp_path: Path) -> None:
    """systemd's quoting: a value with quotes, spaces, $ or % stays one argument, taken
    literally (no variable or specifier expansion); systemd-analyze reads the unit."""
    import shlex
    import shutil
    import subprocess
    out = _render("nodecert-revalidate.service.j2", {
        "validators_schedule_suite": "quick", "validators_schedule_history_keep": 30,
        "validators_schedule_textfile_dir": f"/var/lib/{HOSTILE}",
        "validators_schedule_force": False, "validators_schedule_idle": True,
        "validators_slurm_drain": True,
        "validators_slurm_resume": False, "validators_slurm_node": HOSTILE,
        "validators_schedule_timeout_s": 600})
    line = next(ln for ln in out.splitlines() if ln.startswith("ExecStart="))
    argv = [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line[10:])]
    assert argv[argv.index("--textfile-dir") + 1] == f"/var/lib/{HOSTILE}"
    assert argv[argv.index("--slurm-node") + 1] == HOSTILE
    assert "--force" not in argv and "--idle" in argv  # gives way to GPU jobs by default
    if shutil.which("systemd-analyze"):
        unit = tmp_path / "nc-quoting.service"
        unit.write_text(out)
        p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                           text=True, timeout=60, check=False)
        assert "quoting" not in p.stderr and p.returncode == 0, p.stderr


def test_operator_values_are_shell_quoted_in_the_apt_hook_and_slurm_scripts() -> None:
    import subprocess
    hook = _render("dpkg-post-invoke.j2", {"validators_update_watch_regex": HOSTILE,
                                           "validators_update_wait_s": 30})
    watch = next(ln for ln in hook.splitlines() if ln.startswith("WATCH="))
    got = subprocess.run(["sh", "-c", f'{watch}; printf %s "$WATCH"'], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert got == HOSTILE
    health = _render("slurm-health.j2", {"item": "prolog", "validators_slurm_node": HOSTILE,
                                         "validators_slurm_health_budget_s": 20})
    cmd = next(ln for ln in health.splitlines() if ln.startswith("exec "))
    got = subprocess.run(["sh", "-c", cmd.replace("exec /usr/bin/python3 -m nodecert_node",
                                                  "printf '%s\\n'")],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert got.splitlines()[-1] == HOSTILE
