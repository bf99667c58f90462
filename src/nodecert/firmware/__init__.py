"""Firmware to the recipe: what would change on each host (plan) and the updates staged
through each BMC's Redfish UpdateService and followed to the end (apply), from the
images of the air-gapped mirror, each checked against its sha256."""
