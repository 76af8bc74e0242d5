"""``python -m xla_keras``: the ``xla-keras`` command line."""

from xla_keras.tools.cli import main

if __name__ == "__main__":
    main()
