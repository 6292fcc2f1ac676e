"""Business transform modules."""
