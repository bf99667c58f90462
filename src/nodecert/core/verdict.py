"""The ordered verdict scale shared by the stack gate and the validators.

Defined once, in the node-side package (validators/nodecert_node/contract.py),
because the nodes produce verdicts too; the control side re-exports it.
"""

from __future__ import annotations

from nodecert_node.contract import Verdict, worst

__all__ = ["Verdict", "worst"]
