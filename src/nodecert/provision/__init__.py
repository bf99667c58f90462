"""`provision` and the main job: the preflight every entry point runs, Ansible through
ansible-runner with conformance per host, the air-gapped mirror (Debian repository
metadata read as apt reads it, fetching with time limits, build and verify), and the chain
provision -> conformance -> validate -> certify as one library call.

It may import every package below it (nodecert.core up to nodecert.certs) and the node
package's contract, nothing else.
"""
