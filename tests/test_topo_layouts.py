"""`nvidia-smi topo -m` on real-world layouts: old (mlx5_N columns, no NUMA column), new
(NICn + legend), TABs expanded, cells glued by copy/paste, rows that do not add up."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert_node.parse import ParseError, topo
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real" / "topo"


def real(name: str) -> str:
    return (REAL / name).read_text()


@pytest.mark.parametrize(("name", "gpus", "last_col", "cell", "legend0"), [
    ("dgx-a100-8gpu-12nic-topo-m-nv12-old-format.txt", 8, "mlx5_11", "SYS", None),
    ("b200-gke-a4-8gpu-8nic-topo-m-tabs-expanded.txt", 8, "NIC7", "SYS", "mlx5_0"),
    ("b300-sxm6-dell-xe9780-7gpu-610.57.04-topo-m-no-nics-tabs-expanded.txt", 7, "GPU6",
     "NV18", None),
    ("h100-sxm-8gpu-6nic-della-topo-m-blank-cpu-affinity.txt", 8, "NIC5", "NODE", "mlx5_0"),
    ("a100-sxm4-4gpu-nv12-roce-nic-topo-m.txt", 4, "NIC0", "SYS", "rocep49s0"),
])
def test_real_layouts(name: str, gpus: int, last_col: str, cell: str,
                      legend0: str | None) -> None:
    m = topo.parse_topo_matrix(real(name))
    assert len(m) == gpus
    assert list(m["GPU0"])[-1] == last_col and m["GPU0"][last_col] == cell
    assert all(m[g][g] == "X" for g in m)  # nothing shifted: self is on the diagonal
    assert topo.nic_legend(real(name)).get("NIC0") == legend0


def test_b200_nic_affinity_read_in_the_right_columns() -> None:
    m = topo.parse_topo_matrix(real("b200-gke-a4-8gpu-8nic-topo-m-tabs-expanded.txt"))
    assert [m["GPU4"][f"NIC{i}"] for i in range(8)] == \
        ["SYS", "SYS", "SYS", "SYS", "PIX", "PIX", "NODE", "NODE"]


def test_glued_cells_split_when_unambiguous() -> None:
    text = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV18PIX\t0-55\t0\n"       # two cells glued
            "GPU1\tNV18 X\tSYS0-55\t0\n")         # cell glued to the CPU affinity
    m = topo.parse_topo_matrix(text)
    assert m == {"GPU0": {"GPU0": "X", "GPU1": "NV18", "NIC0": "PIX"},
                 "GPU1": {"GPU0": "NV18", "GPU1": "X", "NIC0": "SYS"}}


def test_glued_header_names_split() -> None:
    m = topo.parse_topo_matrix("\tGPU0GPU1\tmlx5_0\tCPU Affinity\n"
                               "GPU0\t X \tNV12\tPXB\t0-1\nGPU1\tNV12\t X \tPXB\t0-1\n")
    assert list(m["GPU1"]) == ["GPU0", "GPU1", "mlx5_0"]


@pytest.mark.parametrize(("row", "why"), [
    ("GPU0\t X \tNV18\t0-55\t0", "2 cells for 3 device columns"),      # a cell lost
    ("GPU0\t X \tNV18x\tPIX\t0-55", "'NV18x' is not a link type"),      # unreadable cell
    ("GPU0\tNV18\t X \tPIX\t0-55", "not 'X' against itself"),           # shifted
])
def test_ambiguous_rows_are_refused(row: str, why: str) -> None:
    with pytest.raises(ParseError, match=re.escape(why)):
        topo.parse_topo_matrix("\tGPU0\tGPU1\tNIC0\tCPU Affinity\n" + row + "\n")


def test_p2p_status_matrix_is_not_taken_for_topo_m() -> None:
    with pytest.raises(ParseError, match="'NS' is not a link type"):
        topo.parse_topo_matrix(real("rtx2080ti-2gpu-topo-p2p-p-not-supported.txt"))


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(["dgx-a100-8gpu-12nic-topo-m-nv12-old-format.txt",
                             "b200-gke-a4-8gpu-8nic-topo-m-tabs-expanded.txt",
                             "h100-sxm-8gpu-6nic-della-topo-m-blank-cpu-affinity.txt"]),
       sep=st.sampled_from(["\t", " ", "  ", "   \t"]), lead=st.sampled_from(["", "\t", " "]),
       glue=st.sets(st.integers(0, 30), max_size=6), row_order=st.randoms())
def test_property_respaced_glued_reordered_read_the_same(name: str, sep: str, lead: str,
                                                         glue: set[int], row_order) -> None:
    want = topo.parse_topo_matrix(real(name))
    lines = real(name).split("Legend:")[0].splitlines()
    header, rows = lines[0], [ln for ln in lines[1:] if ln.startswith("GPU")]
    row_order.shuffle(rows)
    out = [lead + sep.join(header.split("\t" if "\t" in header else None))]
    for r in rows:
        cells = re.split(r"\t| {2,}", r.strip())
        cells = [c.strip() or "X" for c in cells]
        n_dev = len(want["GPU0"])
        # glue some neighbouring device cells together, as a lossy paste does
        joined = [cells[0]]
        for k, c in enumerate(cells[1:n_dev + 1], 1):
            if k in glue and k > 1:
                joined[-1] += c
            else:
                joined.append(c)
        out.append(sep.join(joined + cells[n_dev + 1:]))
    assert topo.parse_topo_matrix("\n".join(out)) == want
