"""The checks, one module per check prefix (`dcgm.py` holds `dcgm.*`).

Each module declares its checks with `nodecert_node.registry.check`; the registry
discovers every public module here. Helpers shared by several modules start with
an underscore or live outside this package.
"""
