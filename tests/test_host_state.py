"""The one read a role makes of its files, units and tools before its steps
(roles/nodecert_common/files/host_state.py): the state lines its steps compare with."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.env import REPO

PROBE = REPO / "roles" / "nodecert_common" / "files" / "host_state.py"
ME = f"{pwd.getpwuid(os.getuid())[0]} {grp.getgrgid(os.getgid())[0]}"


def read(request: dict[str, Any], env: dict[str, str] | None = None,
         ) -> tuple[int, dict[str, Any], str]:
    # The role runs it as `python3 -c <source> <request>`: so does the test.
    proc = subprocess.run([sys.executable, "-c", PROBE.read_text(), json.dumps(request)],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_files_directories_links_and_missing_paths_read_as_one_line_each(
        tmp_path: Path) -> None:
    f = tmp_path / "unit.conf"
    f.write_bytes(b"[Unit]\nDescription=x\n")
    f.chmod(0o640)
    d = tmp_path / "dir"
    d.mkdir(mode=0o750)
    d.chmod(0o750)
    (tmp_path / "link").symlink_to("unit.conf")
    paths = [str(f), str(d), str(tmp_path / "link"), str(tmp_path / "absent"),
             str(f / "under-a-file")]
    rc, out, _ = read({"paths": paths})
    assert rc == 0
    digest = hashlib.sha256(b"[Unit]\nDescription=x\n").hexdigest()
    assert out["paths"] == {
        str(f): f"file 0640 {ME} {digest}",
        str(d): f"directory 0750 {ME}",
        str(tmp_path / "link"): "link unit.conf",
        str(tmp_path / "absent"): "missing",
        str(f / "under-a-file"): "missing",
    }
    assert out["mtime"][str(f)] == pytest.approx(f.stat().st_mtime)
    assert out["mtime"][str(tmp_path / "absent")] is None
    assert out["now"] >= f.stat().st_mtime


def test_a_changed_byte_or_mode_changes_the_line(tmp_path: Path) -> None:
    # The role skips a step only when the line is exactly what it would leave.
    f = tmp_path / "hook"
    f.write_text("a\n")
    f.chmod(0o644)
    before = read({"paths": [str(f)]})[1]["paths"][str(f)]
    f.write_text("b\n")
    f.chmod(0o644)
    after_content = read({"paths": [str(f)]})[1]["paths"][str(f)]
    f.chmod(0o600)
    after_mode = read({"paths": [str(f)]})[1]["paths"][str(f)]
    assert len({before, after_content, after_mode}) == 3


def test_text_is_read_whole_and_refused_past_the_limit(tmp_path: Path) -> None:
    small, big = tmp_path / "record.json", tmp_path / "big"
    small.write_text('{"stack": "r580-cuda13.0"}\n')
    big.write_bytes(b"x" * ((1 << 20) + 1))
    rc, out, _ = read({"text": [str(small), str(big), str(tmp_path / "absent")]})
    assert rc == 0
    assert out["text"] == {str(small): '{"stack": "r580-cuda13.0"}\n', str(big): None,
                           str(tmp_path / "absent"): None}


def test_commands_report_rc_output_and_time_limits(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("not a program\n")  # mode 0644
    rc, out, _ = read({"run": {
        "ok": {"argv": ["sh", "-c", "echo one; echo two"], "timeout": 30},
        "fails": {"argv": ["sh", "-c", "echo why >&2; exit 3"], "timeout": 30},
        "absent": {"argv": [str(tmp_path / "no-such-tool")], "timeout": 30},
        "not_executable": {"argv": [str(tmp_path / "plain-file")], "timeout": 30},
        "hangs": {"argv": ["sleep", "30"], "timeout": 0.5},
    }})
    assert rc == 0  # none of them is required
    assert out["run"]["ok"] == {"rc": 0, "stdout": "one\ntwo", "stdout_lines": ["one", "two"],
                                "stderr": ""}
    assert out["run"]["fails"]["rc"] == 3 and out["run"]["fails"]["stderr"] == "why\n"
    assert out["run"]["absent"]["rc"] == 127
    assert out["run"]["not_executable"]["rc"] == 126
    assert "Permission denied" in out["run"]["not_executable"]["stderr"]
    assert out["run"]["hangs"]["rc"] == 124
    assert "timed out" in out["run"]["hangs"]["stderr"]


def test_a_required_command_that_fails_fails_the_read_and_says_which(tmp_path: Path) -> None:
    rc, out, err = read({"run": {"dpkg": {"argv": ["sh", "-c", "echo locked >&2; exit 2"],
                                          "timeout": 30, "check": True}}})
    assert rc == 1
    assert out["run"]["dpkg"]["rc"] == 2  # the whole read is still printed
    assert "sh -c echo locked >&2; exit 2 failed (rc 2): locked" in err


def test_units_read_unknown_when_systemd_cannot_answer(tmp_path: Path) -> None:
    # No systemctl on PATH (a container without systemd): every unit reads "unknown",
    # which no step takes for "enabled active" -- the steps run.
    rc, out, _ = read({"units": ["nodecert-revalidate.timer"]},
                      env={"PATH": str(tmp_path)})
    assert rc == 0
    assert out["units"] == {"nodecert-revalidate.timer": "unknown unknown unknown"}


def test_units_are_read_from_systemctl_show_in_the_order_asked(tmp_path: Path) -> None:
    # A stand-in systemctl printing what `systemctl show` prints for two units.
    fake = tmp_path / "systemctl"
    fake.write_text("#!/bin/sh\nprintf 'Id=a.timer\\nUnitFileState=enabled\\nActiveState=active"
                    "\\nNeedDaemonReload=no\\n\\nId=b.service\\nUnitFileState=disabled\\n"
                    "ActiveState=inactive\\nNeedDaemonReload=yes\\n'\n")
    fake.chmod(0o755)
    rc, out, _ = read({"units": ["a.timer", "b.service"]}, env={"PATH": str(tmp_path)})
    assert rc == 0
    assert out["units"] == {"a.timer": "enabled active no",
                            "b.service": "disabled inactive yes"}
    # A block missing (systemctl answered for fewer units): nothing is guessed.
    rc, out, _ = read({"units": ["a.timer", "b.service", "c.service"]},
                      env={"PATH": str(tmp_path)})
    assert set(out["units"].values()) == {"unknown unknown unknown"}
