"""Pinned stacks and what is known about them: NVIDIA's version strings, the sourced
compatibility matrix, the stack manifests (stacks/*.yml), the compatibility gate that proves
a stack right for a GPU model and OS, and conformance (is a host exactly what its stack
pins?).

It may import nodecert.core and the node package's contract, nothing else.
"""
