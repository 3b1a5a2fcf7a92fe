"""Shared code of the RAG and integration nodes: documents, chunking, embedders, vector stores."""
