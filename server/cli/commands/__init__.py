"""CLI subcommands; each module exposes ``register(subparsers)`` and imports heavy code lazily."""
