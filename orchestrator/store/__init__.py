"""The Redis run store and what it stands on: the store itself (``redis_store.py``, Lua
scripts in ``lua/``; it implements the kernel's ``RunStore``/``RunQuery``), command batching,
the key layout (``keys.py``), the client factory (``redis_client.py``), binary content
(``blobs.py``) and storage budgets (``storage_budget.py``). Imports no Celery, no node."""
