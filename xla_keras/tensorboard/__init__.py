"""The "XLA" tab for TensorBoard: a dynamic plugin (``plugin.py``) over what the monitor writes.

``views.py`` computes what the tab shows from a report dict (pure);
``static/index.js`` and ``static/style.css`` lay it out in the browser with no
build step and no network access beyond the TensorBoard server. TensorBoard
finds the plugin through the ``tensorboard_plugins`` entry point.
"""
