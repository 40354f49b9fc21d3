"""End-to-end walks through the command line, as a new user takes them."""
