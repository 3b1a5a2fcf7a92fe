"""Helpers shared by several node types (skipped by discovery: the folder starts with ``_``)."""
