"""tasks (see DESIGN.md)."""
