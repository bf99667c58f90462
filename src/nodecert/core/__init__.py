"""The foundation every other package stands on: the error types and exit codes, where
nodecert's data trees live, running external commands (always with a time limit), cleaning
untrusted text, strict YAML reading with errors that name file, line and field, the ordered
verdict scale, and the environment Ansible runs in.

It imports nothing of nodecert; every package may import it. From the node package it may
import only the contract.
"""
