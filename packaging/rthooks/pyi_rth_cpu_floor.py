# Runs before every other runtime hook of the bundle (PyInstaller runs custom ones first): PySide6's own hook
# imports shiboken6, which, like NumPy, dies with "Illegal instruction" on a CPU older than x86-64-v2. Say so
# instead (app/cpu_floor.py), in a desktop dialog too when no terminal shows stderr.
import sys

from app.cpu_floor import refuse_if_too_old
from ui.shell.platform_check import show_outside_terminal

if _code := refuse_if_too_old(show_outside_terminal if sys.stderr is not None else None):
    sys.exit(_code)
