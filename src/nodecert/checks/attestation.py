"""attestation.gpu carries the GPUs' hardware-rooted evidence the certificate states."""

from __future__ import annotations

from nodecert.core.checks import declare

declare("attestation.gpu", module=__name__, roles=("attestation",))
