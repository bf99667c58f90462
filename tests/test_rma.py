"""The RMA evidence bundle of a failed node: what it holds, and that it verifies offline
only as signed (a changed, missing or added byte fails it)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodecert.certs.signing import init_key, load_private_key, load_public_key
from nodecert.cli import main
from nodecert.fleet import rma
from support.runs import make_run, passing, recorded_results


@pytest.fixture
def failed(tmp_path: Path) -> tuple[Path, Path, Path]:
    results = passing(recorded_results())
    gpu = next(r for r in results if r["check"] == "health.gpu")
    gpu.update(verdict="FAIL", summary="GPU 00000000:00:06.0: 2 uncorrectable ECC errors",
               fault_code="NC-GPU-HEALTH")
    results.append({"check": "bmc.sel", "verdict": "FAIL", "summary": "PSU 2 failure",
                    "fault_code": "NC-BMC-SEL-CRITICAL",
                    "value": {"entries": [{"message": "Power Supply PS2 Failure detected"}]}})
    runs = tmp_path / "runs"
    runs.mkdir()
    make_run(runs, {"gpu-07": {"results": results}})
    kp = init_key(tmp_path / "keys")
    return runs, kp.private, kp.public


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar}


def test_the_bundle_holds_the_evidence_and_verifies(failed: tuple[Path, Path, Path],
                                                     tmp_path: Path) -> None:
    runs, key, pub = failed
    bug = tmp_path / "nvidia-bug-report.log.gz"
    bug.write_bytes(b"\x1f\x8bnot really")
    b = rma.build(runs, "gpu-07", tmp_path / "rma.tar.gz", load_private_key(key), added=(bug,))
    got = _members(b.path)
    assert {"results.json", "failing.json", "kernel-log.txt", "bmc.json", "identity.json",
            "history.json", "added/nvidia-bug-report.log.gz", "manifest.json",
            "manifest.intoto.dsse.json"} <= set(got)
    failing = json.loads(got["failing.json"])
    assert [f["check"] for f in failing] == ["health.gpu", "bmc.sel"]
    assert failing[0]["actions"]["chain"] == ["drain", "reset-gpu", "reboot", "field-diag",
                                              "rma"]
    assert json.loads(got["bmc.json"])[0]["summary"] == "PSU 2 failure"
    ident = json.loads(got["identity.json"])
    assert ident and "gpus" in json.dumps(ident)
    # the recorded machine's kernel log: every kept line concerns the GPUs, PCIe or errors
    lines = got["kernel-log.txt"].decode().splitlines()
    assert lines and all(rma.KERNEL.search(line) for line in lines)
    m = rma.verify(b.path, [load_public_key(pub)])
    assert m["host"] == "gpu-07" and m["failing"] == ["health.gpu", "bmc.sel"]
    assert m["not_collected"] == []


def _rewrite(src: Path, dst: Path, change: dict[str, bytes | None]) -> None:
    members = _members(src)
    for name, data in change.items():
        if data is None:
            members.pop(name)
        else:
            members[name] = data
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"rma-gpu-07/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(("change", "message"), [
    ({"kernel-log.txt": b"nothing to see\n"}, "kernel-log.txt: changed"),
    ({"bmc.json": None}, "bmc.json: missing"),
    ({"extra.txt": b"x"}, "extra.txt: not in the signed manifest"),
    ({"manifest.json": b"{}"}, "manifest.json: differs from the signed manifest"),
])
def test_any_change_fails_verification(failed: tuple[Path, Path, Path], tmp_path: Path,
                                       change: dict[str, bytes | None], message: str) -> None:
    runs, key, pub = failed
    b = rma.build(runs, "gpu-07", tmp_path / "rma.tar.gz", load_private_key(key))
    _rewrite(b.path, tmp_path / "bad.tar.gz", change)
    with pytest.raises(rma.RmaError, match=message):
        rma.verify(tmp_path / "bad.tar.gz", [load_public_key(pub)])


def test_the_cli_refuses_a_healthy_node_and_another_signer(failed: tuple[Path, Path, Path],
                                                           tmp_path: Path) -> None:
    runs, key, _ = failed
    cli = CliRunner()
    out = tmp_path / "rma.tar.gz"
    r = cli.invoke(main, ["fleet", "rma", "gpu-07", "--out", str(out), "--key", str(key),
                          "--runs-dir", str(runs)])
    assert r.exit_code == 0, r.output
    other = init_key(tmp_path / "other")
    r = cli.invoke(main, ["fleet", "rma-verify", str(out), "--pubkey", str(other.public)])
    assert r.exit_code == 1 and "signature does not verify" in r.output
    r = cli.invoke(main, ["fleet", "rma", "gpu-99", "--out", str(tmp_path / "x.tar.gz"),
                          "--key", str(key), "--runs-dir", str(runs)])
    assert r.exit_code == 2 and "has no failing run" in r.output
    assert not (tmp_path / "x.tar.gz").exists()


def _tar(dst: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_member_outside_the_bundle_directory_or_twice_is_refused(
        failed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """`vendor-notes/results.json` beside the signed `rma-gpu-07/` files: before, it was
    read as results.json (the same bytes) and the bundle verified with an unsigned
    member; now every member must be one of the signed files, once."""
    runs, key, pub = failed
    b = rma.build(runs, "gpu-07", tmp_path / "rma.tar.gz", load_private_key(key))
    good = [(f"rma-gpu-07/{n}", d) for n, d in _members(b.path).items()]
    same = dict(good)["rma-gpu-07/results.json"]
    for extra, message in ((("vendor-notes/results.json", same), "unexpected member"),
                           (("rma-other/results.json", same), "outside rma-gpu-07/"),
                           (("rma-gpu-07/results.json", same), "appears twice")):
        _tar(tmp_path / "bad.tar.gz", [*good, extra])
        with pytest.raises(rma.RmaError, match=message):
            rma.verify(tmp_path / "bad.tar.gz", [load_public_key(pub)])


def test_a_large_unsigned_member_is_never_held_in_memory(
        failed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """A small .tar.gz that unpacks to 256 MiB: refused for its unsigned member, its
    bytes streamed through the digest (the peak stays far below the member's size)."""
    import tracemalloc
    runs, key, pub = failed
    b = rma.build(runs, "gpu-07", tmp_path / "rma.tar.gz", load_private_key(key))
    big = tmp_path / "big.tar.gz"
    with tarfile.open(big, "w:gz", compresslevel=1) as tar:
        for n, d in _members(b.path).items():
            info = tarfile.TarInfo(f"rma-gpu-07/{n}")
            info.size = len(d)
            tar.addfile(info, io.BytesIO(d))
        info = tarfile.TarInfo("rma-gpu-07/added/bug-report.log")
        info.size = 256 << 20

        class Zeros(io.RawIOBase):
            left = info.size

            def readable(self) -> bool:
                return True

            def readinto(self, buf: memoryview) -> int:  # type: ignore[override]
                n = min(len(buf), self.left)
                buf[:n] = bytes(n)
                self.left -= n
                return n
        tar.addfile(info, io.BufferedReader(Zeros()))
    assert big.stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(rma.RmaError, match=r"added/bug-report\.log: not in the signed"):
            rma.verify(big, [load_public_key(pub)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak
