"""The project owns no model: ``GrantSigningKey`` moved to ``approvals`` (approvals/signing_keys.py)."""
