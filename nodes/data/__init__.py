"""Data nodes: reshape, filter, split and convert JSON on the spine."""
