"""The vector store adapters, the only code that talks to Qdrant: the port (base: VectorStore, MemoryFilter), a
search described in no store's terms (query), its translations for the embedded Qdrant Edge shard (edge, with
its generations, configuration and background index builds in generations, shard, indexer) and for a Qdrant
server (server), BM25 keywords (keywords) and reading old collections (legacy). Imports only palace.errors.
"""
