"""Node folders (discovered automatically)."""
