"""hardware.inventory reads the hardware identity a certificate is bound to."""

from __future__ import annotations

from nodecert.core.checks import declare

declare("hardware.inventory", module=__name__, roles=("identity",))
