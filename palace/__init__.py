"""The palace domain: memories, their journal, usage, and the ports to the vector store."""

# The release, here so that every layer (the domain writes it into backups and /healthz) can read it downward.
__version__ = "0.1.0"
