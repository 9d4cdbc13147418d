"""pipeline (see DESIGN.md)."""
