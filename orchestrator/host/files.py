"""Files as nodes see them: a binary value travels between nodes as a reference
(``kernel.protocol.BinaryRef``) to the workspace's file store, which a node opens with
``NodeHost.blobs``; :func:`as_binary_ref` reads one out of a value. The store itself is
``orchestrator/store/blobs.py``."""

from orchestrator.store.blobs import as_binary_ref

__all__ = ["as_binary_ref"]
