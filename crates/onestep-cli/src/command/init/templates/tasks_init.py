"""Task handler modules."""
