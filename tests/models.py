"""The small models the suites share (imported by the test modules and by the scripts they run in fresh
processes: both find this folder first on the path)."""


def text_model(jit_compile="auto"):
    """Token ids of any length -> Embedding(100, 8) -> mean over the tokens -> Dense(1), Adam, MSE: the
    storm fits' model (a new sequence length is a new input signature)."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(100, 8),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=jit_compile)
    return model
