"""`specchat chats list|export`: the GUI's saved conversations, from the command line.

The same store and exporter as the window (app.chat), so a script sees what the user sees.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from app import settings as settings_mod
from app.atomic import atomic_write_text
from app.chat.conversations import ChatStore
from app.chat.export import FORMATS, export
from app.cli.options import UserError, usage


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chats = subparsers.add_parser("chats", help="list and export the saved conversations")
    csub = chats.add_subparsers(dest="chats_command", metavar="COMMAND")
    chats.set_defaults(func=lambda _args: usage(chats))
    lst = csub.add_parser("list", help="id, title, last update and message count, newest first")
    lst.add_argument("--json", action="store_true", help="print one JSON list")
    lst.add_argument("--folder", type=Path, help="the conversations folder (default: the profile's)")
    lst.set_defaults(func=_cmd_list)
    exp = csub.add_parser("export", help="one conversation as Markdown or JSON")
    exp.add_argument("id", metavar="ID", help="the conversation's id, or an unambiguous start of it")
    exp.add_argument("--format", choices=FORMATS, default="md")
    exp.add_argument("-o", "--output", type=Path, help="write to this file (atomically) instead of stdout")
    exp.add_argument("--folder", type=Path, help="the conversations folder (default: the profile's)")
    exp.set_defaults(func=_cmd_export)


def _store(folder: Path | None) -> ChatStore:
    # Read-only: a window may be streaming into this folder; its temporary files and journals are its own.
    store = ChatStore(folder, read_only=True)
    store.load_all(lazy=True)
    for problem in store.problems:
        print(f"specchat: warning: {problem}", file=sys.stderr)
    return store


def _cmd_list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = [
        {"id": c.id, "title": c.title, "updated": c.updated, "messages": c.message_count()}
        for c in _store(args.folder).sorted()
    ]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print("no saved conversations")
        return 0
    for row in rows:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated"]))
        print(f"{row['id']}  {stamp}  {row['messages']:>4} msgs  {row['title']}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    store = _store(args.folder)
    known = len(store.problems)
    try:
        conv = store.find(args.id)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    if len(store.problems) > known:  # the chat was a stub whose file cannot be read now
        raise UserError(store.problems[-1])
    saved, _warning = settings_mod.load()
    text = export(conv, args.format, saved.system_prompt)
    if args.output:
        atomic_write_text(args.output, text)
        print(f"exported {conv.id} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
