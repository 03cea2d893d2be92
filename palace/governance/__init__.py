"""What flows in and who reads it: redaction before write (redaction), the read audit (audit), wing-scoped
callers (scope), API tokens (tokens) and the bearer-token rules (auth). Imports the engine (its background
writer), the schema, the models, the store adapters and the exception tree.
"""
