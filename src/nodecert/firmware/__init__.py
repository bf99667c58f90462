"""Firmware to the recipe: what would change on each host (plan) and the updates staged
through each BMC's Redfish UpdateService and followed to the end (apply), from the
images of the air-gapped mirror, each checked against its sha256; and the BIOS
attributes of the host's profile, set through the BMC and verified after a reset.

It may import nodecert.core, nodecert.stack (the recipes and BIOS profiles),
nodecert.inventory (each host's BMC, recipe and profile), nodecert.runs (where the
steps are recorded), nodecert.transport (the vault), nodecert.bmc (the Redfish client),
the node package's contract and its pure parsers, nothing else.
"""
