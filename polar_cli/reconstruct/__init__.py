"""reconstruct (see DESIGN.md)."""
