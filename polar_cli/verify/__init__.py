"""verify (see DESIGN.md)."""
