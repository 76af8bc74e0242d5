"""Keras-level parts shared by the TensorFlow and JAX backends."""
