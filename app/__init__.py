"""SpecChat core: Qt-free engine, models, memory, chat and CLI."""

__version__ = "0.1.0"
