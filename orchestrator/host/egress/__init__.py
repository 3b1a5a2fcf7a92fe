"""The egress policy: which origins a node may connect to (``origins.py``), enforced on
every outbound connection."""
