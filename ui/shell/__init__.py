"""The application shell: start-up, entry point, main window, toolbar, theme, settings dialog, banners
and the GUI self-test."""
