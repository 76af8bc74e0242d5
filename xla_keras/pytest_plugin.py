"""The ``xla_compiles`` pytest fixture, loaded by pytest through the ``pytest11`` entry point.

It imports no Keras, TensorFlow or JAX when pytest loads it: only when a test asks for the fixture.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def xla_compiles():
    """``xla_keras.testing.expect_compiles``, ready to use.

    Example:
        ```python
        def test_the_model_compiles_once(xla_compiles):
            with xla_compiles(train=1):
                model.fit(x, y, batch_size=32, epochs=2, verbose=0)
        ```
    """
    from xla_keras.testing import expect_compiles

    return expect_compiles
