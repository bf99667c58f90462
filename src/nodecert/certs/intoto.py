"""The names every nodecert attestation carries: the in-toto Statement type, the DSSE
payload type, and the predicate type of each kind (node, cluster, rack, revocation list)."""

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "https://nodecert.dev/attestation/node-readiness/v1"
CLUSTER_PREDICATE_TYPE = "https://nodecert.dev/attestation/cluster-readiness/v1"
RACK_PREDICATE_TYPE = "https://nodecert.dev/attestation/rack-readiness/v1"
LIST_PREDICATE_TYPE = "https://nodecert.dev/attestation/revocations/v1"

__all__ = ["CLUSTER_PREDICATE_TYPE", "LIST_PREDICATE_TYPE", "PAYLOAD_TYPE", "PREDICATE_TYPE",
           "RACK_PREDICATE_TYPE", "STATEMENT_TYPE"]
