"""profiles package."""
