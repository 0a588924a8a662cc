"""Every user action of the window, declared once: its text, shortcut, tooltip, menu, toolbar place and when it is
enabled. The QActions, the menu bar and the toolbar's buttons are all built from COMMANDS, so an action cannot be
reachable by key alone or missing from the menus (tests/test_gui_chat_features.py walks the menu bar)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

from app.engine.drafters import CHOICES


class When(Enum):
    """When an action is enabled (WindowActions.sync); MANUAL: its owner says (Undo follows the controller)."""

    ALWAYS = auto()
    IDLE = auto()  # no reply running
    IDLE_NOT_LOADING = auto()  # no reply and no load running (a load in progress is left alone)
    IDLE_LOADED = auto()  # no reply running and models loaded
    MANUAL = auto()


@dataclass(frozen=True)
class Command:
    name: str  # the QAction's attribute on WindowActions
    text: str
    menu: str  # the menu bar's menu
    section: int  # a separator between sections of one menu
    shortcut: str | None = None
    tip: str = ""
    toolbar: int = 0  # the toolbar's section (1: before the mode selector, 2: after it), 0: not on the toolbar
    checkable: bool = False
    when: When = When.ALWAYS
    enabled: bool = True  # at start (MANUAL actions)


FILE, CHAT, VIEW, MODELS, HELP = "&File", "&Chat", "&View", "&Models", "&Help"

COMMANDS: tuple[Command, ...] = (
    Command("new", "New chat", FILE, 0, "Ctrl+N"),
    Command("export_md", "Export chat as Markdown…", FILE, 1, "Ctrl+E"),
    Command("export_json", "Export chat as JSON…", FILE, 1, "Ctrl+Shift+E"),
    Command("quit", "Quit", FILE, 2, "Ctrl+Q"),  # StandardKey.Quit is empty on some desktops
    Command("send", "Send", CHAT, 0, "Ctrl+Return"),
    Command("stop", "Stop", CHAT, 0, "Esc", "Stop the reply"),
    Command("regenerate", "Regenerate reply", CHAT, 1, "Ctrl+R", "A new reply to the last prompt",
            when=When.IDLE_LOADED),
    Command("continue_reply", "Continue reply", CHAT, 1, "Ctrl+Shift+R", "Go on with a reply cut by the token limit",
            when=When.IDLE_LOADED),
    Command("system", "System prompt…", CHAT, 1, "Ctrl+Shift+S", "This chat's system prompt"),
    Command("rename_chat", "Rename chat…", CHAT, 2, "F2", "Give the current chat another title"),
    Command("delete_chat", "Delete chat", CHAT, 2, "Ctrl+Shift+Backspace",
            "Delete the current chat (Undo brings it back)"),
    Command("copy_reply", "Copy last reply", CHAT, 3, "Ctrl+Shift+C", "Copy the last reply's text"),
    Command("edit_prompt", "Edit last prompt…", CHAT, 3, "Ctrl+Shift+Up", "Edit the last prompt and send it again"),
    Command("delete_last", "Delete last message", CHAT, 3, None,
            "Delete the last prompt or reply (Undo brings it back)"),
    Command("undo", "Undo delete", CHAT, 4, "Ctrl+Z", "Bring back the last deleted chat or message",
            when=When.MANUAL, enabled=False),
    Command("compare", "Compare", CHAT, 5, "Ctrl+K", "Side by side: plain vs speculative decoding", toolbar=2,
            checkable=True, when=When.IDLE),
    Command("search", "Search chats", CHAT, 5, "Ctrl+F"),
    Command("colours", "Colour tokens by fate", VIEW, 0, checkable=True),
    Command("ghosts", "Show rejected drafts", VIEW, 0, checkable=True),
    Command("replay", "Replay side by side", VIEW, 1, None, "Play the last comparison at its measured speeds"),
    *(Command(f"mode_{mode}", f"Mode: {mode}", VIEW, 2, None, f"Speculate with {mode}", checkable=True)
      for mode in CHOICES),
    Command("models", "Models…", MODELS, 0, "Ctrl+M", "Choose the target and the draft", toolbar=1,
            when=When.IDLE_NOT_LOADING),
    Command("settings", "Settings…", MODELS, 0, "Ctrl+,", "Sampling, speculation, runtime, theme", toolbar=1),
    Command("about", "About SpecChat…", HELP, 0, None, "Version, llama.cpp build and its backends"),
)


def make_action(window: QMainWindow, command: Command) -> QAction:
    """The command's QAction, added to the window so its shortcut works wherever the focus is."""
    action = QAction(command.text, window)
    tip = command.tip or command.text
    if command.shortcut is not None:
        action.setShortcut(QKeySequence(command.shortcut))
        tip += f" ({action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)})"
    action.setToolTip(tip)
    action.setCheckable(command.checkable)
    action.setEnabled(command.enabled)
    window.addAction(action)
    return action


class WindowActions:
    """The QActions of COMMANDS, each an attribute by its name; `modes` groups the Mode: entries."""

    def __init__(self, window: QMainWindow) -> None:
        self.by_name = {c.name: make_action(window, c) for c in COMMANDS}
        for name, action in self.by_name.items():
            setattr(self, name, action)
        self.modes = QActionGroup(window)
        for mode in CHOICES:
            self.modes.addAction(self.by_name[f"mode_{mode}"])

    def __getattr__(self, name: str) -> QAction:  # typed access to the actions set in __init__
        raise AttributeError(name)

    def mode(self, mode: str) -> QAction:
        return self.by_name[f"mode_{mode}"]

    def build_menu_bar(self, window: QMainWindow) -> None:
        """The menus in COMMANDS' order, a separator between a menu's sections."""
        menus: dict[str, tuple[QMenu, int]] = {}
        for command in COMMANDS:
            if command.menu not in menus:
                menus[command.menu] = (window.menuBar().addMenu(command.menu), command.section)
            menu, section = menus[command.menu]
            if section != command.section:
                menu.addSeparator()
            menu.addAction(self.by_name[command.name])
            menus[command.menu] = (menu, command.section)

    def toolbar(self, section: int) -> list[QAction]:
        return [self.by_name[c.name] for c in COMMANDS if c.toolbar == section]

    def sync(self, generating: bool, loading: bool, loaded: bool) -> None:
        """Each action's enabled state by its rule."""
        state = {When.IDLE: not generating, When.IDLE_NOT_LOADING: not generating and not loading,
                 When.IDLE_LOADED: not generating and loaded}
        for command in COMMANDS:
            if command.when in state:
                self.by_name[command.name].setEnabled(state[command.when])
