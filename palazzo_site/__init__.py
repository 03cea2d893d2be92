"""palazzo: a Django MCP memory server over Qdrant."""

from palace import __version__

__all__ = ["__version__"]
