"""gateway/protocols (see DESIGN.md)."""
