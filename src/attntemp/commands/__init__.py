"""CLI sub-commands: each module defines ``register(subparsers)``; see ``attntemp.cli``."""
