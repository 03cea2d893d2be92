"""palazzo: a Django MCP memory server over Qdrant."""

__version__ = "0.1.0"
