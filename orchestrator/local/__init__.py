"""The processes the embedded default owns: a redis-server (``embedded_redis.py``) and
worker processes (``embedded_workers.py``) that the CLI starts when no ``REDIS_URL`` is set."""
