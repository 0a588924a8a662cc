"""SpecChat desktop GUI (PySide6). Everything Qt lives here; app/ never imports it."""
