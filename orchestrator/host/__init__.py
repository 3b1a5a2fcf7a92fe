"""What a node may use, and nothing else: ``NodeHost`` (the run's workspace, settings,
credentials, files, an egress-guarded HTTP client, the sandbox, redaction). Nodes import
this package and the kernel only."""
