"""What the product leaves on disk: the run directory, the codes file, the ground-truth cache
beside a dataset, the compiled training steps in the user's cache, and the atomic writes they
all go through. The only package that knows file names on disk."""
