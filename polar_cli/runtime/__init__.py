"""runtime (see DESIGN.md)."""
