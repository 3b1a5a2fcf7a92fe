"""The Celery transport, used by the API, the CLI, beat and the worker alike: the app's
broker settings (``app.py``) and sending node tasks (``dispatch.py``, the one ``Dispatcher``
protocol). The worker's own Celery instance, with tasks registered, is ``workers.app``."""
