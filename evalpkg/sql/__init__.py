"""SQL text as evalpkg reads it: parsing (`parse`), fingerprints (`fingerprint`), and the one definition
of a statement allowed to run read-only, for agents and golds alike (`guard`)."""
