"""Desktop files and icons, shipped as package data: reached through importlib.resources, in a
source checkout, an installed wheel and the PyInstaller bundle alike."""
