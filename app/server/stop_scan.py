"""Stop sequences on streamed text: what may be sent now, and where a stop sequence ends the reply.

Text that could be the start of a stop sequence is held back until the next piece decides it, so a client never
receives part of a stop sequence (as OpenAI's API and llama-server behave)."""

from __future__ import annotations


class StopScan:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.text = ""  # everything fed, stop sequence included
        self.sent = 0  # characters of `text` released
        self.stopped_at: int | None = None  # where the first stop sequence starts, once one matched

    def feed(self, piece: str) -> str:
        """Add `piece`; the text that is now safe to send (up to a stop sequence, if one matched)."""
        if self.stopped_at is not None:
            return ""
        self.text += piece
        if not self.stops:
            return self._release(len(self.text))
        start = max(0, self.sent - max(len(s) for s in self.stops) + 1)
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if hits:
            self.stopped_at = min(hits)
            return self._release(self.stopped_at)
        return self._release(len(self.text) - self._open_prefix())

    def flush(self) -> str:
        """At the end of the reply: what was held back (it never became a stop sequence)."""
        return "" if self.stopped_at is not None else self._release(len(self.text))

    def _open_prefix(self) -> int:
        """The longest end of the unsent text that begins a stop sequence."""
        tail = self.text[self.sent:]
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(tail)), best, -1):
                if tail.endswith(stop[:n]):
                    best = n
                    break
        return best

    def _release(self, end: int) -> str:
        out = self.text[self.sent:end]
        self.sent = max(self.sent, end)
        return out
