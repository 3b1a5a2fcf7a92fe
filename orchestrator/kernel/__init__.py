"""The generic graph kernel.

Pure Python: imports only the standard library and pydantic. It knows nodes, ports,
edges, channels, runs, values and events, and never a node type or a domain word
(``tests/kernel/test_kernel_generic.py`` enforces both).
"""
