"""Command groups of the ``runwatch`` CLI, one module each (see :mod:`runwatch.cli`).

Each module defines ``register(subparsers)``; keep the modules thin: parse
arguments, build settings, call into the service or core code.
"""
