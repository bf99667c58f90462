"""firmware.recipe: judged once the host's run and its BMC's readings are in (what the
BMC's inventory and the node's own tools report, against the host's recipe); its facts
are the certificate's firmware bill of materials."""

from __future__ import annotations

from nodecert.core.checks import HostReadings, declare
from nodecert.stack import firmware
from nodecert_node.contract import Result


def _recipe(h: HostReadings) -> Result | None:
    if h.recipe is None:
        return None
    m = h.monitor
    return firmware.judge_recipe(h.recipe, m.firmware_inventory if m else None,
                                 firmware.inband_readings(h.results),
                                 bmc_error=m.firmware_error if m else h.no_bmc)


declare("firmware.recipe", module=__name__, roles=("firmware-record",), after_bmc=_recipe,
        order=10)
