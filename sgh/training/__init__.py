"""Training SGH: the compiled loop, its batches and devices, validation and model selection,
what happens after each call (progress, checkpoints, TensorBoard), and `SGHHasher`."""
