"""gateway (see DESIGN.md)."""
