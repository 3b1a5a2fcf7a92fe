"""Core nodes of the chat experience."""
