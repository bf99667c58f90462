"""known_hosts read once and indexed: the same keys, the same precedence as paramiko."""

from __future__ import annotations

import os
from pathlib import Path

import paramiko
import pytest

from nodecert.transport import knownhosts


def _key() -> paramiko.PKey:
    return paramiko.Ed25519Key.from_private_key(  # a fresh key each call
        _fresh_private())


def _fresh_private() -> object:
    import io

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption())
    return io.StringIO(pem.decode())


def _line(name: str, key: paramiko.PKey) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    knownhosts.forget()
    return tmp_path / "home"


def test_only_the_named_hosts_keys_are_given(home: Path, tmp_path: Path) -> None:
    a, b = _key(), _key()
    f = tmp_path / "kh"
    f.write_text(_line("[10.0.0.1]:2222", a) + _line("10.0.0.2", b) + "# a comment\n"
                 + "garbage line that is no key\n")
    assert knownhosts.keys_for("[10.0.0.1]:2222", (str(f),)) == {"ssh-ed25519": a}
    assert knownhosts.keys_for("10.0.0.2", (str(f),)) == {"ssh-ed25519": b}
    assert knownhosts.keys_for("10.0.0.1", (str(f),)) == {}  # port 22 is another name
    assert knownhosts.server_name("10.0.0.1", 22) == "10.0.0.1"
    assert knownhosts.server_name("10.0.0.1", 2222) == "[10.0.0.1]:2222"


def test_the_users_file_wins_and_later_files_replace_earlier(home: Path,
                                                             tmp_path: Path) -> None:
    user, first, second = _key(), _key(), _key()
    f1, f2 = tmp_path / "one", tmp_path / "two"
    f1.write_text(_line("h1", first) + _line("h2", first))
    f2.write_text(_line("h2", second))
    (home / ".ssh" / "known_hosts").write_text(_line("h1", user))
    # paramiko: the system (user's) file, when it lists the name, is the only answer.
    assert knownhosts.keys_for("h1", (str(f1), str(f2))) == {"ssh-ed25519": user}
    assert knownhosts.keys_for("h2", (str(f1), str(f2))) == {"ssh-ed25519": second}


def test_hashed_names_and_aliases(home: Path, tmp_path: Path) -> None:
    k, alias_key = _key(), _key()
    hashed = paramiko.HostKeys.hash_host("[10.0.0.9]:22")
    f = tmp_path / "kh"
    f.write_text(f"{hashed} {k.get_name()} {k.get_base64()}\n" + _line("bmc-front", alias_key))
    assert knownhosts.keys_for("[10.0.0.9]:22", (str(f),)) == {"ssh-ed25519": k}
    assert knownhosts.keys_for("[10.0.0.8]:22", (str(f),)) == {}
    got = knownhosts.keys_for("10.0.0.7", (str(f),), alias="bmc-front")
    assert got == {"ssh-ed25519": alias_key}


def test_a_changed_file_is_read_again(home: Path, tmp_path: Path) -> None:
    old, new = _key(), _key()
    f = tmp_path / "kh"
    f.write_text(_line("h", old))
    assert knownhosts.keys_for("h", (str(f),)) == {"ssh-ed25519": old}
    f.write_text(_line("h", new) + "# grown\n")  # another size: re-parsed at once
    os.utime(f, ns=(1, 1))
    assert knownhosts.keys_for("h", (str(f),)) == {"ssh-ed25519": new}
    f.unlink()
    assert knownhosts.keys_for("h", (str(f),)) == {}


def test_a_revoked_key_is_never_given_as_known(home: Path, tmp_path: Path) -> None:
    """@revoked (OpenSSH's marker) withdraws a key for the hosts the line names, in the
    user's file or any other; a pattern or !negation is honoured as ssh does."""
    good, bad = _key(), _key()
    (home / ".ssh" / "known_hosts").write_text(_line("h1", bad) + _line("h3", good))
    f = tmp_path / "kh"
    f.write_text(_line("h2", bad) + f"@revoked h? {bad.get_name()} {bad.get_base64()}\n"
                 + f"@revoked *,!h3 {good.get_name()} {good.get_base64()}\n")
    assert knownhosts.keys_for("h1", (str(f),)) == {}
    assert knownhosts.keys_for("h2", (str(f),)) == {}
    assert knownhosts.revoked_for("h1", (str(f),)) == [bad, good]
    assert knownhosts.keys_for("h3", (str(f),)) == {"ssh-ed25519": good}
    assert knownhosts.revoked_for("h3", (str(f),)) == [bad]
    assert knownhosts.revoked_for("[h1]:2222", (str(f),)) == [good]
