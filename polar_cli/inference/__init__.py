"""inference (see DESIGN.md)."""
