"""Server-sent events: bytes off the wire in, event payloads out.

A pure, incremental parser (no I/O) so that it can be tested on hand-written byte splits: network
reads cut lines anywhere, including inside a UTF-8 character or between ``\\r`` and ``\\n``.
"""

from __future__ import annotations

DONE = "[DONE]"


class SSEDecoder:
    """Feed raw bytes; get back the ``data`` payload of every complete event.

    Follows the SSE rules that matter for LLM servers: events end at a blank line, several
    ``data:`` lines of one event are joined with newlines, one space after the colon is dropped,
    comment lines (``:``) and other fields (``event:``, ``id:``, ``retry:``) are ignored.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            end = self._line_end()
            if end is None:
                return events
            line_end, next_start = end
            line = self._buffer[:line_end].decode("utf-8", errors="replace")
            self._buffer = self._buffer[next_start:]
            self._take_line(line, events)

    def close(self) -> list[str]:
        """Flush a final event the server did not terminate with a blank line."""
        events: list[str] = []
        if self._buffer:
            line = self._buffer.decode("utf-8", errors="replace").rstrip("\r")
            self._buffer = b""
            self._take_line(line, events)
        self._take_line("", events)
        return events

    def _line_end(self) -> tuple[int, int] | None:
        """(end of the first complete line, start of the next), or None if no line is complete."""
        lf = self._buffer.find(b"\n")
        cr = self._buffer.find(b"\r")
        if cr == -1 or (lf != -1 and lf < cr):
            return None if lf == -1 else (lf, lf + 1)
        if cr + 1 == len(self._buffer):
            return None  # a lone \r at the end may be the first half of \r\n
        return (cr, cr + 2) if self._buffer[cr + 1 : cr + 2] == b"\n" else (cr, cr + 1)

    def _take_line(self, line: str, events: list[str]) -> None:
        if line == "":
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        if line.startswith(":"):
            return
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
