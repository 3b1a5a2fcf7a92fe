"""Integration nodes: HTTP requests and database queries."""
