"""Markdown source -> blocks of styled text runs that remember where each character came from.

The transcript colours every character by the token that produced it. Rendering Markdown drops
markup (`**`, backticks, `#`) and rewrites some text, so each visible piece is located back in the
source (pieces come in source order, so a moving cursor finds them); `offsets[i]` is the source
offset of the piece's i-th character, or -1 for text the renderer made up (bullets, separators).
No Qt here: the view turns blocks into QTextDocument blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.token import _TokenType
from pygments.util import ClassNotFound


@dataclass
class Run:
    text: str
    offsets: list[int]  # source offset per character; -1: synthetic
    style: frozenset[str] = frozenset()  # "bold", "italic", "code", "strike", "link", "dim"
    ttype: _TokenType | None = None  # pygments token type inside code blocks
    href: str | None = None


@dataclass
class Block:
    kind: str  # "paragraph", "heading", "code", "quote", "hr", "table"
    level: int = 0  # heading level
    indent: int = 0  # list / quote nesting
    lang: str = ""
    runs: list[Run] | Iterator[Run] = field(default_factory=list)  # code blocks: lexed lazily


def _parser() -> MarkdownIt:
    # "breaks": a single newline is a line break, as models (and haiku) expect in chat.
    return MarkdownIt("commonmark", {"breaks": True, "html": False}).enable(["table", "strikethrough"])


_MD = _parser()
_lexer_warmup = get_lexer_by_name("python")  # importing a lexer module costs ~20 ms: not mid-render


class _Locator:
    """Finds rendered pieces in the source, in order."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.pos = 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def seek_line(self, line: int) -> None:
        if line < len(self.line_starts):
            self.pos = max(self.pos, self.line_starts[line])

    def line_end(self, line: int) -> int:
        return self.line_starts[line] if line < len(self.line_starts) else len(self.source)

    def locate(self, piece: str, limit: int | None = None) -> list[int]:
        limit = len(self.source) if limit is None else limit
        at = self.source.find(piece, self.pos, limit)
        if at >= 0:
            self.pos = at + len(piece)
            return list(range(at, at + len(piece)))
        if "\n" in piece:  # indentation stripped from a nested code block: line by line
            out: list[int] = []
            for i, line in enumerate(piece.split("\n")):
                if i:
                    out += self.locate("\n", limit)
                out += self.locate(line, limit) if line else []
            return out
        # Escapes and entities (`\*`, `&amp;`): match character by character, a few ahead at most.
        out = []
        for ch in piece:
            at = self.source.find(ch, self.pos, min(limit, self.pos + 8))
            out.append(at)
            if at >= 0:
                self.pos = at + 1
        return out


def parse(source: str) -> list[Block]:
    return list(iter_blocks(source))


def finished_prefix(source: str) -> int:
    """How much of a reply that is still streaming is final: the length of its longest prefix made
    of whole top-level blocks that no later text can change, cut at a line start (0: none yet).

    Only complete lines are read (a partial `#` or `` ``` `` may still become something else). A
    block followed by another block is final (a list ends only when something else begins); the
    last block is final when it ends itself: a heading, a rule, a closed fence, or a paragraph,
    table or quote followed by a blank line. A list's items but the last are final too (an ordered
    one's only while its numbers count up by one, since rendering numbers from the first item).
    Rendering each such prefix on its own gives what rendering the whole reply gives.
    """
    cut = source.rfind("\n") + 1
    if not cut:
        return 0
    text = source[:cut]
    starts = [0] + [m.end() for m in re.finditer("\n", text)]  # starts[-1] == cut: a line past the end
    tokens = _MD.parse(text)
    top = [i for i, t in enumerate(tokens) if t.level == 0 and t.nesting >= 0 and t.map]
    if not top:
        return 0
    done = starts[tokens[top[-2]].map[1]] if len(top) > 1 else 0  # type: ignore[index]
    last = tokens[top[-1]]
    first_line, end_line = last.map  # type: ignore[misc]
    if last.type in ("heading_open", "hr"):
        done = starts[end_line]
    elif last.type == "fence" and end_line - first_line == last.content.count("\n") + 2:  # closed
        done = starts[end_line]
    elif last.type in ("paragraph_open", "table_open", "blockquote_open") and end_line < len(starts) - 1:
        done = starts[end_line]  # a blank line follows (anything else would be a block of its own)
    elif last.type in ("bullet_list_open", "ordered_list_open"):
        items = [t for t in tokens[top[-1]:] if t.type == "list_item_open" and t.level == 1]
        number = int(last.attrGet("start") or 1)
        if len(items) > 1 and (last.type == "bullet_list_open" or items[-1].info == str(number + len(items) - 1)):
            done = starts[items[-1].map[0]]  # type: ignore[index]
    while 0 < done < cut and not text[done:text.index("\n", done)].strip():
        done = text.index("\n", done) + 1  # the blank lines after it too: what stays open starts with text
    return done


def iter_blocks(source: str) -> Iterator[Block]:
    """Blocks one at a time (code is lexed when its block comes), so rendering can be time-sliced."""
    tokens = _MD.parse(source)
    loc = _Locator(source)
    lists: list[list[int | None]] = []  # per open list: next number (None: bullets)
    quote = 0
    bullet: str | None = None
    table_row: Block | None = None
    current: Block | None = None
    for tok in tokens:
        if tok.map:
            loc.seek_line(tok.map[0])
        t = tok.type
        if t in ("bullet_list_open", "ordered_list_open"):
            lists.append([int(tok.attrGet("start") or 1) if t == "ordered_list_open" else None])
        elif t in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif t == "list_item_open":
            number = lists[-1][0]
            if number is None:
                bullet = "•  "
            else:
                bullet = f"{number}{tok.markup or '.'} "
                lists[-1][0] = number + 1
        elif t == "blockquote_open":
            quote += 1
        elif t == "blockquote_close":
            quote -= 1
        elif t in ("paragraph_open", "heading_open"):
            level = int(tok.tag[1]) if t == "heading_open" else 0
            current = Block("heading" if level else ("quote" if quote else "paragraph"), level,
                            indent=len(lists) + quote)
            if bullet:
                current.runs.append(Run(bullet, [-1] * len(bullet), frozenset({"dim"})))
                bullet = None
        elif t in ("paragraph_close", "heading_close"):
            if current is not None:
                yield current
            current = None
        elif t == "inline" and current is not None:
            limit = loc.line_end(tok.map[1]) if tok.map else None
            current.runs += _inline(tok.children or [], loc, limit)
        elif t in ("fence", "code_block"):
            limit = loc.line_end(tok.map[1]) if tok.map else None
            if t == "fence" and tok.map:
                loc.seek_line(tok.map[0] + 1)  # past the opening fence
            code = tok.content.removesuffix("\n")
            lang = tok.info.strip().split(" ")[0] if t == "fence" else ""
            yield Block("code", indent=len(lists) + quote, lang=lang,
                        runs=_code_runs(code, lang, loc.locate(code, limit)))
            bullet = None
        elif t == "hr":
            yield Block("hr")
        elif t == "tr_open":
            table_row = Block("table", indent=len(lists) + quote)
        elif t == "tr_close" and table_row is not None:
            yield table_row
            table_row = None
        elif t in ("th_open", "td_open") and table_row is not None:
            if table_row.runs:
                table_row.runs.append(Run("  │  ", [-1] * 5, frozenset({"dim"})))
            current = table_row
        elif t in ("th_close", "td_close"):
            current = None
        elif t == "html_block":
            content = tok.content.removesuffix("\n")
            yield Block("paragraph", runs=[Run(content, loc.locate(content))])


def _inline(children: list[Token], loc: _Locator, limit: int | None) -> list[Run]:
    runs: list[Run] = []
    style: set[str] = set()
    href: str | None = None
    for child in children:
        t = child.type
        if t in ("text", "html_inline"):
            if child.content:
                runs.append(Run(child.content, loc.locate(child.content, limit), frozenset(style), href=href))
        elif t == "code_inline":
            runs.append(Run(child.content, loc.locate(child.content, limit), frozenset(style | {"code"}), href=href))
        elif t in ("softbreak", "hardbreak"):
            runs.append(Run("\n", loc.locate("\n", limit), frozenset(style)))
        elif t.endswith("_open") or t.endswith("_close"):
            name = {"strong": "bold", "em": "italic", "s": "strike", "link": "link"}.get(t.rsplit("_", 1)[0])
            if name is None:
                continue
            if t.endswith("_open"):
                style.add(name)
                if name == "link":
                    href = str(child.attrGet("href") or "")
            else:
                style.discard(name)
                if name == "link":
                    href = None
        elif t == "image":
            alt = child.content or "image"
            runs.append(Run(alt, loc.locate(alt, limit), frozenset(style | {"italic"})))
    return runs


def _lexer(lang: str) -> Lexer:
    try:
        return get_lexer_by_name(lang, stripnl=False, ensurenl=False) if lang else TextLexer()
    except ClassNotFound:
        return TextLexer()


def _code_runs(code: str, lang: str, offsets: list[int]) -> Iterator[Run]:
    """Lazily: pygments lexes as the renderer consumes, so a long code block is time-sliced too."""
    at = 0
    for ttype, value in _lexer(lang).get_tokens(code):
        if not value:
            continue
        if code[at: at + len(value)] != value:  # a lexer that rewrote the text: the rest stays plain
            break
        yield Run(value, offsets[at: at + len(value)], frozenset({"code"}), ttype)
        at += len(value)
    if at < len(code):
        yield Run(code[at:], offsets[at:], frozenset({"code"}))
