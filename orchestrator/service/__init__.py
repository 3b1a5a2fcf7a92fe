"""What the faces (API, CLI, worker, beat) do with runs and graphs: start runs
(``runs.py``, ``admission.py``), approvals, schedules, the sweeper, the graph store, the chat
protocol, node discovery (``plugins.py``). Stands on the store, queue and host layers."""
