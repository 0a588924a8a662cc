"""Developer tools run from a source checkout (`python -m tools.bench ...`). Not part of the product: the wheel,
the PyInstaller bundle and the .deb leave this package out, and app/ and ui/ never import it (import-linter)."""
