"""Flow control: routing, merging, loops and code."""
