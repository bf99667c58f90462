"""What a multi-node job printed, read apart: each task's own output from the engine's
labels (srun --label, mpirun --tag-output)."""

from __future__ import annotations

import re

_SLURM_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
# OpenMPI tags every chunk of output it forwards, not every line: where a chunk ended
# mid-line, the line goes on after another tag on the same printed line (of that rank,
# or of another whose chunk came in between).
_MPI_TAG = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:")


def demux(output: str) -> dict[int | None, str]:
    """The output of each task (srun --label, mpirun --tag-output); lines of the launcher
    itself under None."""
    out: dict[int | None, list[str]] = {}
    partial: dict[int, str] = {}  # rank -> its line so far, where a chunk ended mid-line
    for line in output.splitlines():
        tags = list(_MPI_TAG.finditer(line))
        if tags and tags[0].start() == 0:
            for k, tag in enumerate(tags):
                rank = int(tag.group(1))
                end = tags[k + 1].start() if k + 1 < len(tags) else len(line)
                text = line[tag.end():end]
                if rank not in partial and text.startswith(" "):
                    text = text[1:]  # "[1,0]<stdout>: text": the separator, not the text
                text = partial.pop(rank, "") + text
                if k + 1 < len(tags):
                    partial[rank] = text
                else:
                    out.setdefault(rank, []).append(text)
            continue
        m = _SLURM_LABEL.match(line)
        key = int(m.group(1)) if m else None
        out.setdefault(key, []).append(m.group(2) if m else line)
    for rank, text in partial.items():  # the output ended mid-line
        out.setdefault(rank, []).append(text)
    return {k: "\n".join(v) + "\n" for k, v in out.items()}



__all__ = ["demux"]
