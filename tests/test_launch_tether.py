"""The launch command's tether, run by real shells (dash and bash): what a job's launcher
started ends when nodecert's SSH channel closes, even when the launcher only started
after nodecert had given up on it; a job that ends by itself keeps its exit code and
output, and leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodecert.transport.jobs import Job, JobResult
from nodecert.transport.tether import tethered
from support.cluster import ScriptedLauncher

SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]


def tagged_pids(tag: str) -> list[int]:
    """Processes whose environment holds NODECERT_JOB=tag (as the tether looks)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"NODECERT_JOB={tag}".encode() in env:
            found.append(int(d.name))
    return found


def wait_for(pred: object, within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[str], tag: str) -> Iterator[subprocess.Popen[str]]:
    """proc, and whatever of the job `tag` a failed test left, killed on the way out."""
    try:
        yield proc
    finally:
        proc.kill()
        for pid in tagged_pids(tag):
            os.kill(pid, 9)


def left_nothing(proc: subprocess.Popen[str], tag: str, tmp: Path) -> int:
    """proc's exit code, once it ended having left no process of the job and no file."""
    rc = proc.wait(timeout=30)
    assert not tagged_pids(tag)
    assert not list(tmp.iterdir())
    return rc


def start(shell: str, command: str, tag: str, stdin: int, tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([shell, "-c", tethered(tag, command)],
                            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "TMPDIR": str(tmp)})


@pytest.mark.parametrize("shell", SHELLS)
def test_closing_the_channel_ends_the_launcher_and_its_shell_cleans_up(
        shell: str, tmp_path: Path) -> None:
    tag = f"nodecert-t{secrets.token_hex(4)}"
    # mpirun's shape: a private directory, removed on the way out, then the launcher
    cmd = (f"d=$(mktemp -d) && trap 'rm -rf \"$d\"' EXIT && NODECERT_JOB={tag} sleep 300")
    with reaped(start(shell, cmd, tag, subprocess.PIPE, tmp_path), tag) as proc:
        assert wait_for(lambda: tagged_pids(tag), 10), "the launcher never started"
        assert list(tmp_path.iterdir())  # its directory exists while it runs
        assert proc.stdin is not None
        proc.stdin.close()  # the SSH channel closes: nodecert gave up on the job
        # the shell ended normally: its trap ran
        assert left_nothing(proc, tag, tmp_path) != 0


@pytest.mark.parametrize("shell", SHELLS)
def test_a_launcher_that_starts_after_the_channel_closed_never_runs(
        shell: str, tmp_path: Path) -> None:
    tag = f"nodecert-t{secrets.token_hex(4)}"
    seen: list[int] = []
    # The channel is closed before the command's shell even reads it (stdin at its end
    # from the start); the launcher would start a second and a half later (time for the
    # watcher to act on a busy machine: it has one pass over /proc to make first).
    proc = start(shell, f"sleep 1.5; NODECERT_JOB={tag} sleep 300", tag, subprocess.DEVNULL,
                 tmp_path)
    try:
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            seen.extend(tagged_pids(tag))
            time.sleep(0.05)
        proc.wait(timeout=20)
        assert not tagged_pids(tag)
        assert not seen, "the launcher started after its channel had closed"
    finally:
        proc.kill()
        for pid in tagged_pids(tag):
            os.kill(pid, 9)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_job_that_ends_by_itself_keeps_its_code_and_output(shell: str,
                                                             tmp_path: Path) -> None:
    tag = f"nodecert-t{secrets.token_hex(4)}"
    proc = start(shell, f"NODECERT_JOB={tag} sh -c 'echo \" 0: hi\"; exit 3'", tag,
                 subprocess.PIPE, tmp_path)
    out, _ = proc.communicate(timeout=20)  # stdin stays open until it has ended
    assert proc.returncode == 3 and out == " 0: hi\n"
    # No watcher left behind holding the channel
    assert proc.stdin is not None and proc.stdin.closed


def test_ctrl_c_sweeps_the_running_jobs_then_cancels_them_all_and_again_at_the_end() -> None:
    class Blocking(ScriptedLauncher):
        def remote(self, command: str, timeout: float,
                   always: bool = False) -> tuple[int | None, str, bool]:
            if "srun" in command:  # the job runs until the interrupt ends the wait
                self.cancelled.wait(10)
                return None, "", True
            return super().remote(command, timeout, always)

    sl = Blocking({})
    jobs = [Job(f"nodecert-x-pair-{k}", (f"h{k}",), "true", {}, 30) for k in (1, 2)]
    results: list[JobResult] = []
    threads = [threading.Thread(target=lambda j=j: results.append(sl.run(j))) for j in jobs]
    for t in threads:
        t.start()
    assert wait_for(lambda: len(sl._running) == 2, 5)
    sl.interrupt()
    for t in threads:
        t.join(10)
    # Each swept once, by the interrupt (all at once); its own thread does not sweep it
    # again node after node once its wait ended.
    assert sorted(sl.swept) == ["nodecert-x-pair-1", "nodecert-x-pair-2"]
    # what they left is then not known to their threads: never reported as clean
    assert sorted((r.job.name, r.error, r.leftovers) for r in results) == [
        (f"nodecert-x-pair-{k}", "interrupted: cancelled with the run", {f"h{k}": -1})
        for k in (1, 2)]
    all_at_once = [c for c in sl.sent if c.startswith(
        "scancel --name=nodecert-x-pair-1; scancel --name=nodecert-x-pair-2;")
        or c.startswith("scancel --name=nodecert-x-pair-2; scancel --name=nodecert-x-pair-1;")]
    assert len(all_at_once) == 1
    sl.settle()  # once the threads are done: the same cancel once more
    assert sl.sent[-1].split("; quiet")[0] == all_at_once[0].split("; quiet")[0]


@pytest.mark.parametrize("shell", SHELLS)
def test_a_job_fed_from_the_channel_reads_it_and_ends_when_it_closes(
        shell: str, tmp_path: Path) -> None:
    """The Slurm runner's jobs read the channel's input (code, then plan): it reaches the
    launcher whole and in order; its end (the channel closed) is the launcher's input's
    end, and whatever of the job still runs is ended; the private FIFO is gone."""
    tag = f"nodecert-t{secrets.token_hex(4)}"
    # reads a line, says it, then waits on its input as the node's run does (EOF: stop),
    # leaving a process of the job behind that only the tether's sweep ends
    cmd = (f"NODECERT_JOB={tag} sleep 300 & read -r line; echo \"got $line\"; cat >/dev/null; "
           "echo input-ended; wait")
    fed = subprocess.Popen([shell, "-c", tethered(tag, cmd, stdin=True)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "TMPDIR": str(tmp_path)})
    with reaped(fed, tag) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("the plan\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "got the plan\n"
        assert list(tmp_path.iterdir())  # the FIFO's private directory, while it runs
        proc.stdin.close()  # the channel closes
        assert proc.stdout.readline() == "input-ended\n"
        left_nothing(proc, tag, tmp_path)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_job_fed_from_the_channel_that_ends_by_itself_keeps_its_exit_code(
        shell: str, tmp_path: Path) -> None:
    """srun refusing the job: it exits without reading its input; the launch ends at
    once with srun's exit code and words, though the channel is still open."""
    tag = f"nodecert-t{secrets.token_hex(4)}"
    proc = subprocess.Popen([shell, "-c", tethered(tag, "echo refused >&2; exit 1",
                                                   stdin=True)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert proc.stdin is not None
        proc.stdin.write("x" * 200_000)  # more than a pipe holds: never blocks the end
        proc.stdin.flush()
    except BrokenPipeError:
        pass
    with reaped(proc, tag):
        assert left_nothing(proc, tag, tmp_path) == 1
        assert proc.stderr is not None and proc.stderr.read() == "refused\n"


class _Sessions:
    """An SSH connection to a launch host whose sshd allows 10 sessions at once (OpenSSH's
    MaxSessions default): the 11th channel is refused."""

    def __init__(self) -> None:
        self.open = 0
        self.most = 0

    def get_transport(self) -> _Sessions:
        return self

    def open_session(self) -> _Channel:
        if self.open >= 10:
            import paramiko
            raise paramiko.ChannelException(1, "Administratively prohibited")
        self.open += 1
        self.most = max(self.most, self.open)
        return _Channel(self)

    def close(self) -> None:
        pass


class _Channel:
    def __init__(self, conn: _Sessions) -> None:
        self.conn = conn

    def close(self) -> None:
        self.conn.open -= 1


def test_the_launcher_opens_another_connection_before_sshd_would_refuse_a_session() -> None:
    """Jobs at once past what one connection's sshd allows (MaxSessions, 10 by default)
    go on further connections, never refused; a closed channel's room is used again."""
    from nodecert.inventory.cluster import ClusterConfig
    from nodecert.transport.jobs import CHANNELS_PER_CONNECTION, Launcher
    from support.cluster import ep
    conns: list[_Sessions] = []

    def connect(_: object) -> _Sessions:
        conns.append(_Sessions())
        return conns[-1]
    launcher = Launcher(ClusterConfig(engine="slurm"), ep("login01"),
                        connector=connect)  # type: ignore[arg-type]
    chans = [launcher._channel() for _ in range(20)]
    assert len(conns) == 3 and [c.most for c in conns] == [CHANNELS_PER_CONNECTION] * 2 + [4]
    for chan in chans[:5]:
        launcher._closed(chan)
    launcher._channel()
    assert len(conns) == 3 and conns[0].open == CHANNELS_PER_CONNECTION - 4  # room reused
