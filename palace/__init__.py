"""The palace domain, one package per concern, each importing only the packages below it (`make lint`).

From the top: the entry points (`api`, `admin`, `routes/`, `management/`), `operations/` (status, health,
backups, bulk ingest and export, usage), `feeding/` (harness transcripts into memories), `writes/` and
`reads/` (the write services and the read selectors, independent of each other), `governance/`
(redaction, audit, wing scopes, tokens), `engine/` (the open palace: journal, applier, points, model),
`schema/` with `models` (the one memory schema, its forms, the database tables), `store/` (the Qdrant
adapters) and `errors` (the one exception tree).
"""

# The release, here so that every layer (the domain writes it into backups and /healthz) can read it downward.
__version__ = "0.1.0"
