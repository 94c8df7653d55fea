"""Training SGH: the compiled loop, devices, validation, model selection, and `SGHHasher`."""
