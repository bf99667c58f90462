"""Validation profiles as the control side reads them: the node's check catalog and the
thresholds and suites under validators/ (profiles per GPU model, site overrides),
resolved for one host.

It may import nodecert.core and the node package's contract, nothing else.
"""
