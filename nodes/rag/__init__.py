"""RAG nodes: load documents, chunk, embed, store and search vectors."""
