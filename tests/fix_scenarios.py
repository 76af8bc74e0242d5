"""Storm fixes applied with ``xla_keras.data`` on fresh models, counted in XLA's own dump.

Run by tests/test_fix_ground_truth.py in a subprocess (XLA_FLAGS must be set before the
backend is imported), under ``KERAS_BACKEND`` tensorflow (tf.data pipelines) or jax (numpy
batches and PyDatasets, no TensorFlow in the fix):

    python tests/fix_scenarios.py OUT.json DUMP_DIR

Each scenario first fits a model whose data storms (or, for the compile budget, whose
validation alone recompiles), takes the advised fix from the report, applies it with
``xla_keras.data`` to the same data and fits a fresh model on the result. ``dump`` lists the
modules XLA dumped during that second fit only. The generator's exact token counts are
written next to the stated ones; for images, the elements of the batches built here and the
logits of the storm's model on the images as built, zero-padded (numpy, here) and regrouped.
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from jax_scenarios import Batches, module_name  # noqa: E402 - tests/ is on the path now

BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")


def _modules(dump_dir):
    if not os.path.isdir(dump_dir):
        return set()
    return {f for f in os.listdir(dump_dir) if f.endswith(".before_optimizations.txt")}


def sequences(rng, n, low, high):
    """(token ids 1..97, label) examples of ``low``..``high - 1`` tokens, and their lengths."""
    lengths = rng.integers(low, high, size=n)
    return [(np.arange(k, dtype=np.int32) % 97 + 1, np.float32(k % 2)) for k in lengths], lengths


def unbatched(examples):
    if BACKEND != "tensorflow":
        return list(examples)
    import tensorflow as tf

    return tf.data.Dataset.from_generator(
        lambda: iter(examples), output_signature=(tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.float32))
    )


def batched(examples, size):
    """Batches of ``size`` (the last one partial), each padded (0) to its longest sequence."""
    if BACKEND == "tensorflow":
        return unbatched(examples).padded_batch(size)
    out = []
    for i in range(0, len(examples), size):
        part = examples[i : i + size]
        x = np.zeros((len(part), max(len(s) for s, _ in part)), np.int32)
        for row, (s, _) in enumerate(part):
            x[row, : len(s)] = s
        out.append((x, np.array([y for _, y in part], np.float32)))
    return Batches(out)


def text_model():
    import keras

    keras.utils.set_random_seed(0)
    # mask_zero: padding is invisible to the model, so the fixed pipelines score like the original
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(100, 8, mask_zero=True),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    # weighted_metrics: the padded rows of a fixed validation pipeline weigh 0 there
    model.compile("adam", "mse", weighted_metrics=["mae"], jit_compile=True)
    return model


def fit(model, data, monitor, **kwargs):
    kwargs.setdefault("epochs", 2)
    model.fit(data, verbose=0, callbacks=[monitor], shuffle=False, **kwargs)
    return monitor.report.to_dict()


def monitored(**kwargs):
    import xla_keras

    kwargs.setdefault("log_dir", None)
    return xla_keras.XlaMonitor(verbose=0, **kwargs)


def fixed_fit(dump_dir, data, monitor_kwargs=None, model=text_model, **kwargs):
    """A fresh model fitted on ``data``: its report and the modules XLA dumped meanwhile."""
    before = _modules(dump_dir)
    report = fit(model(), data, monitored(**(monitor_kwargs or {})), **kwargs)
    return {"report": report, "dump": sorted(module_name(f) for f in _modules(dump_dir) - before)}


IMAGE_SIZES = (24, 28, 32, 40)


def image_model():
    """Two convolutions, BatchNormalization and GlobalAveragePooling2D over RGB images of any size."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None, None, 3)),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    return model


def images(rng):
    """Square RGB images, per size a batch of 4 then 3 batches of 8 (each epoch ends on a full batch)."""
    out = []
    for size in IMAGE_SIZES:
        for rows in (4, 8, 8, 8):
            x = rng.normal(size=(rows, size, size, 3)).astype(np.float32)
            out.append((x, rng.integers(0, 3, size=rows).astype(np.int32)))
    return out


def image_data(batches):
    """The batches as fit takes them; ``image_source``: as apply_fix takes them."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.data.Dataset.from_generator(
            lambda: iter(batches),
            output_signature=(tf.TensorSpec((None, None, None, 3), tf.float32), tf.TensorSpec((None,), tf.int32)),
        )
    return Batches(batches)


def image_source(batches):
    # numpy: a generator, read at once (a lazy sequence can drop only its last short batch)
    return image_data(batches) if BACKEND == "tensorflow" else iter(batches)


def batches_of(data):
    """The numpy batches a fixed pipeline yields."""
    if BACKEND == "tensorflow":
        return [tuple(np.asarray(part) for part in batch) for batch in data.as_numpy_iterator()]
    return [data[i] for i in range(len(data))]


def logits(model, x):
    return np.asarray(model(x, training=False))


def image_scenarios(dump_dir, rng):
    """Images of 4 sizes storm: the padding counted here, the logits zero-padding changes, the pad fix and
    the exact alternative applied (recognised by the next fit's advice), and that alternative's fit with
    the record of applied fixes forgotten (the advice it would get)."""
    import xla_keras

    xla_keras.data.applied.forget()  # the text scenarios' fixes are no part of this
    batches = images(rng)
    model = image_model()
    settings = {"storm_threshold": 6, "compile_budget_floor": 0}  # no floor: the budget's share alone decides
    storming = fit(model, image_data(batches), monitored(**settings))
    fix = storming["storms"][0]["fix"]
    lengths = {t["axis"]: t["lengths"] for t in fix["targets"] if t["path"] == "x"}

    def pad(x):
        widths = [(0, 0)] * x.ndim
        for axis, table in lengths.items():
            widths[axis] = (0, min(n for n in table if n >= x.shape[axis]) - x.shape[axis])
        return np.pad(x, widths)

    real = sum(x.size for x, _ in batches)
    padded = sum(pad(x).size for x, _ in batches)
    change = max(float(np.abs(logits(model, pad(x)) - logits(model, x)).max()) for x, _ in batches)
    results = {
        "images": {"report": storming, "real_elements": real, "padded_elements": padded, "logits_change": change}
    }
    results["images_pad"] = fixed_fit(
        dump_dir, xla_keras.data.apply_fix(image_source(batches), fix), settings, image_model
    )
    exact = xla_keras.data.apply_fix(image_source(batches), fix["bucket_by_size"])
    before = {x[i].tobytes(): row for x, _ in batches for i, row in enumerate(logits(model, x))}
    regrouped = batches_of(exact)
    after = [(x[i].tobytes(), row) for x, _ in regrouped for i, row in enumerate(logits(model, x))]
    results["images_exact"] = fixed_fit(dump_dir, exact, settings, image_model)
    results["images_exact"].update(
        shapes=sorted({x.shape for x, _ in regrouped}),
        rows=sum(len(x) for x, _ in regrouped),
        unknown_rows=sum(1 for key, _ in after if key not in before),
        logits_change=max(float(np.abs(row - before[key]).max()) for key, row in after if key in before),
    )
    unrecognised = xla_keras.data.apply_fix(image_source(batches), fix["bucket_by_size"])
    xla_keras.data.applied.forget()
    results["images_exact_unrecognised"] = fixed_fit(dump_dir, unrecognised, settings, image_model)
    return results


def main(out_path, dump_dir):
    import warnings

    import xla_keras

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    results = {}

    # Padded sequences storm: pad to the advised lengths, then bucket by real length.
    examples, lengths = sequences(rng, 400, 5, 91)
    storming = fit(text_model(), batched(examples, 16), monitored(storm_threshold=4), epochs=1)
    fix = storming["storms"][0]["fix"]
    fed = sum(len(examples[i : i + 16]) * max(lengths[i : i + 16]) for i in range(0, 400, 16))
    results["storm"] = {"report": storming, "real_tokens": int(lengths.sum()), "fed_tokens": int(fed)}
    results["pad"] = fixed_fit(dump_dir, xla_keras.data.apply_fix(batched(examples, 16), fix))
    results["bucket"] = fixed_fit(dump_dir, xla_keras.data.bucket_by_length(unbatched(examples), fix))

    # Batch sizes 16..23: one fixed size.
    sized = []
    for size in range(16, 24):
        x = rng.integers(1, 97, size=(size, 12)).astype(np.int32)
        sized.append((x, np.ones(size, np.float32)))
    if BACKEND == "tensorflow":
        import tensorflow as tf

        sized_data = tf.data.Dataset.from_generator(
            lambda: iter(sized),
            output_signature=(tf.TensorSpec((None, 12), tf.int32), tf.TensorSpec((None,), tf.float32)),
        )
    else:
        sized_data = Batches(sized)
    storming = fit(text_model(), sized_data, monitored(storm_threshold=4), epochs=1)
    fix = storming["storms"][0]["fix"]
    results["batch_size"] = fixed_fit(dump_dir, xla_keras.data.apply_fix(sized_data, fix))
    results["batch_size"]["storm"] = storming

    # Validation alone recompiles (a few lengths and its own partial batch), below the threshold:
    # the compile budget's advice, applied to the validation data only.
    train_examples, _ = sequences(rng, 256, 40, 41)  # one length: training compiles once
    val_examples, val_lengths = sequences(rng, 100, 5, 60)
    train = batched(train_examples, 32)
    xla_keras.data.applied.forget()  # the fixes applied above are not this validation data's
    # No floor: the share decides (the 1-second floor is tested on its own, test_storms.py and
    # test_storm_fits.py), so the advice and its fix are checked whatever this machine's compile speed.
    no_floor = {"compile_budget_floor": 0}
    budget = fit(text_model(), train, monitored(**no_floor), validation_data=batched(val_examples, 16))
    advice = budget["advice"]
    results["budget"] = {"report": budget, "real_tokens": int(val_lengths.sum())}
    if advice:
        fixed_val = xla_keras.data.apply_fix(batched(val_examples, 16), advice[0]["fix"])
        run = fixed_fit(dump_dir, train, no_floor, validation_data=fixed_val)
        # The padded rows weigh nothing: the same model scores the same on both pipelines.
        model = text_model()
        model.fit(train, epochs=1, verbose=0)
        run["mae"] = {
            "original": model.evaluate(batched(val_examples, 16), verbose=0, return_dict=True)["mae"],
            "fixed": model.evaluate(fixed_val, verbose=0, return_dict=True)["mae"],
        }
        results["budget_fixed"] = run

    results.update(image_scenarios(dump_dir, rng))

    results["tensorflow_imported"] = "tensorflow" in sys.modules
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
