"""What runs on the launch host and the nodes around a job: the tether that ends a job's
launcher when nodecert's channel closes, and the sweep that ends what a job left on a
node. Both find a job's processes by NODECERT_JOB=<name> in their environment, in POSIX
sh (the launch user's login shell runs them)."""

from __future__ import annotations

import shlex


def tagged(name: str, action: str) -> str:
    """Shell running `action` for each process of the job `name` (its pid is
    ${q#/proc/}). One grep reads every process's environment (NUL-separated entries,
    -z): a busy launch host answers in one process, not two for each of its hundreds,
    so a launcher that was about to start is found before it does."""
    tag = shlex.quote(f"NODECERT_JOB={name}")
    return (f"for q in $(grep -lsxzF {tag} /proc/[0-9]*/environ); do q=${{q%/environ}}; "
            f"{{ {action}; }}; done")


def sweep_script(name: str) -> str:
    """End the job's processes (SIGTERM, so srun and mpirun withdraw what they asked of
    the engine; SIGKILL a second later), then print how many are left (left=N)."""
    return (f"n=0; {tagged(name, 'kill -TERM ${q#/proc/} 2>/dev/null; n=1')}; "
            f"[ $n = 0 ] || sleep 1; {tagged(name, 'kill -9 ${q#/proc/} 2>/dev/null')}; "
            f"n=0; {tagged(name, 'n=$((n+1))')}; echo left=$n")


def tethered(name: str, command: str, *, stdin: bool = False) -> str:
    """The launch command of the job `name`, ended when the SSH channel it came on closes.

    Closing a channel does not end what it started: an srun that the launch host only
    got round to starting after nodecert gave up on it (Ctrl-C, a limit) would still
    queue its job. So the channel's stdin is watched (nodecert never writes to it: it
    reaches its end only when the channel closes, or at once if that came first); then
    every process of the job is sent SIGTERM, and the command's own shell too while it
    has not yet started any, until nothing of the job has been seen for a second (at
    most 15 s). The command's exit code and output are its own.

    stdin: the command reads the channel's input (the Slurm runner's code and plan): it
    is passed on through a FIFO in a private directory, and its end (the channel closed)
    reaches the command as its input's end before the job is ended as above."""
    term = tagged(name, "kill -TERM ${q#/proc/} 2>/dev/null; n=1")
    ended = ("i=0; quiet=0; "
             "while [ $i -lt 75 ] && [ $quiet -lt 5 ]; do n=0; " + term + "; "
             "if kill -0 $p 2>/dev/null; then quiet=0; [ $n = 1 ] || kill -TERM $p "
             "2>/dev/null; elif [ $n = 0 ]; then quiet=$((quiet+1)); else quiet=0; fi; "
             "sleep 0.2; i=$((i+1)); done")
    if stdin:
        # (an asynchronous list reads /dev/null unless told otherwise: both are told)
        return ("d=$(mktemp -d) && mkfifo -m 0600 \"$d/in\" || exit 125; exec 3<&0; "
                f"( {command} ) <\"$d/in\" 3<&- & p=$!; "
                f"( cat >\"$d/in\"; {ended} ) <&3 >/dev/null 2>&1 & w=$!; exec 3<&-; "
                "wait $p; rc=$?; kill $w 2>/dev/null; rm -rf \"$d\"; exit $rc")
    watch = "while read -r _; do :; done; " + ended
    return (f"exec 3<&0 </dev/null; ( {command} ) 3<&- & p=$!; "
            f"( {watch} ) <&3 >/dev/null 2>&1 & w=$!; exec 3<&-; "
            "wait $p; rc=$?; kill $w 2>/dev/null; exit $rc")


__all__ = ["sweep_script", "tagged", "tethered"]
