"""net.ib and net.roce: the network inventory a certificate's run record names."""

from __future__ import annotations

from nodecert.core.checks import declare

declare("net.ib", module=__name__, roles=("ib-record",))
declare("net.roce", module=__name__, roles=("roce-record",))
