"""Workers: the Celery app and node task (``app.py``, ``tasks.py``) and the Redis run
store (``store.py``, Lua scripts in ``lua/``) that makes node completion a distributed,
idempotent barrier. Importing this package imports neither Celery nor Redis."""
