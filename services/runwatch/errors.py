"""Errors every layer may raise and the CLI reports as one line.

A :class:`FatalError` means the command cannot do its work and retrying will
not help: wrong credentials, an ACL refusal, topics that cannot be created.
``runwatch`` prints ``error: <message>`` (the message names what was refused
and why, never a secret) and exits 2, instead of a traceback.
"""


class FatalError(RuntimeError):
    """A command cannot go on; the message says what was refused and why."""
