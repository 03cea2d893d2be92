"""The operator's view and jobs: status, taxonomy and the wake-up of the MCP server (status), /healthz
(health), the admin overview (overview), verify, backups (backup), bulk ingest, export and imports (ingest),
and usage events with the token-gain estimate (gain). Imports every domain package below it.
"""
