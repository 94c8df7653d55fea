"""What the product leaves on disk (run directory, codes file, caches) and the atomic writes they
all go through: the only package that knows file names on disk."""
