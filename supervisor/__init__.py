"""supervisor package."""
