"""dataset (see DESIGN.md)."""
