"""The control side's half of each check, one module per check prefix (`load.py` holds
what the control side does with `load.*`): how a gathered result is judged here, how its
figures appear on the certificate's page, which parameters it must echo, which role it
plays. Each module declares with `nodecert.core.checks.declare`; nothing imports these
modules by name: `nodecert.core.checks.discover()` finds them.

It may import nodecert.core, nodecert.stack, nodecert.certs (the page's drawing and
voice) and the node package's contract, nothing else.
"""
