"""``python -m xla_keras``: the ``xla-keras`` command line."""

from .cli import main

if __name__ == "__main__":
    main()
