"""Certificates and the reports people read: the hardware identity, signing keys and DSSE
envelopes, the in-toto Statement per node and per cluster, offline verification, the HTML
pages with their templates and inline SVG plots, and JUnit XML.

It may import nodecert.core, nodecert.stack, nodecert.transport, nodecert.inventory,
nodecert.runs, nodecert.validation and the node package's contract, nothing else.
"""
