"""hardware.inventory reads the hardware identity a certificate is bound to;
hardware.topology is the GPU topology its run record names."""

from __future__ import annotations

from nodecert.core.checks import declare

declare("hardware.inventory", module=__name__, roles=("identity",))
declare("hardware.topology", module=__name__, roles=("topology-record",))
