"""Node types shipped with the product: one folder per type, grouped by category.

Each folder ``nodes/<category>/<type_id>/`` holds ``definition.json`` (validated as
``orchestrator.kernel.definition.NodeDefinition``) and ``executor.py`` exporting
``executor``. Discovery imports each executor by file path, so an executor imports only
``orchestrator.kernel``, ``nodes._shared``, the standard library and third-party
packages. Every worker and CLI process imports every executor at start, so a heavy
library a node needs only when it runs (Agno, SQLAlchemy, numpy, httpx, ...) is imported
inside ``execute``/``materialize`` (docs/architecture.md; a test holds it). Folders whose
name starts with ``_`` are helpers, not node types.
"""
