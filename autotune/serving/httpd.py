"""A lean HTTP/1.1 server on asyncio streams: keep-alive, Content-Length bodies, TCP_NODELAY.

Why our own: the artifact's server must run on the standard library, and :mod:`http.server` is one thread per
connection without keep-alive pipelining into asyncio. What it does: parse the request line and headers
(64 KiB at most: 431), read a Content-Length body (chunked: 411; over ``max_body``: 413; gzip/deflate bodies
inflated), call the handler, write its response; TCP_NODELAY on every socket (Nagle plus delayed ACK would add
40 ms to small responses). A handler raises :class:`HttpError` for a 4xx/5xx with a JSON ``{"error": ...}``.

Standard library only: copied beside ``serve.py`` into the artifact.
"""

from __future__ import annotations

import asyncio
import json
import socket
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

MAX_BODY = 256 << 20
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
            413: "Payload Too Large", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}

Response = tuple[int, bytes, dict[str, str]]
Handler = Callable[[str, str, dict[str, str], bytes], Awaitable[Response]]


class HttpError(Exception):
    """Answer ``status`` with ``{"error": message}`` (``close``: then close the connection)."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.close = status, close


class HttpServer:
    """Connections served by ``handler(method, path, headers, body)``; ``on_error(status)`` counts failures."""

    def __init__(self, handler: Handler, on_error: Callable[[int], None] | None = None,
                 max_body: int = MAX_BODY) -> None:
        self.handler, self.on_error, self.max_body = handler, on_error, max_body
        self.stopping = False
        self.idle: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen; the port bound (port 0: a free one)."""
        self.server = await asyncio.start_server(self._connection, host, port, limit=1 << 16)
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        """Stop accepting and close idle keep-alive connections; requests in progress get their response."""
        self.stopping = True
        if self.server is not None:
            self.server.close()
        for w in list(self.idle):
            w.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while not self.stopping:
                self.idle.add(writer)
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    self.idle.discard(writer)
                    await self._respond(writer, 431, error_body("the request's headers exceed 64 KiB"), {}, False)
                    break
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                self.idle.discard(writer)
                keep = True
                try:
                    method, path, headers, keep = parse_head(head)
                    body = await self._body(reader, writer, headers)
                    status, data, extra = await self.handler(method, path, headers, body)
                except HttpError as e:
                    if self.on_error is not None:
                        self.on_error(e.status)
                    status, data, extra = e.status, error_body(str(e)), {}
                    keep = keep and not e.close
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                except Exception as e:  # a bug in a handler: the client gets a 500, the server lives on
                    status, data, extra = 500, error_body(f"internal error: {type(e).__name__}: {e}"), {}
                    keep = False
                await self._respond(writer, status, data, extra, keep and not self.stopping)
                if not keep:
                    break
        except ConnectionError:
            pass
        finally:
            self.idle.discard(writer)
            writer.close()

    async def _body(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    headers: dict[str, str]) -> bytes:
        if "transfer-encoding" in headers:
            raise HttpError(411, "chunked request bodies are not supported: send Content-Length", close=True)
        try:
            size = int(headers.get("content-length", "0"))
            if size < 0:
                raise ValueError
        except ValueError:
            raise HttpError(400, "Content-Length is not a non-negative integer", close=True) from None
        if size > self.max_body:
            raise HttpError(413, f"the body has {size} bytes, more than {self.max_body}", close=True)
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await reader.readexactly(size) if size else b""
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):
            try:
                inflater = zlib.decompressobj(31 if encoding == "gzip" else 15)
                body = inflater.decompress(body, self.max_body + 1)
            except zlib.error as e:
                raise HttpError(400, f"the {encoding} body does not decompress: {e}") from None
            if len(body) > self.max_body:
                raise HttpError(413, f"the decompressed body has more than {self.max_body} bytes")
        elif encoding != "identity":
            raise HttpError(400, f"Content-Encoding {encoding!r} is not supported (gzip, deflate)")
        return body

    async def _respond(self, writer: asyncio.StreamWriter, status: int, data: bytes, extra: dict[str, str],
                       keep: bool) -> None:
        if data and "Content-Type" not in extra:
            extra = {**extra, "Content-Type": "application/json"}
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Length: {len(data)}",
                 *(f"{k}: {v}" for k, v in extra.items()), *([] if keep else ["Connection: close"])]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()


def parse_head(head: bytes) -> tuple[str, str, dict[str, str], bool]:
    lines = head[:-4].decode("latin-1").split("\r\n")
    try:
        method, path, version = lines[0].split(" ")
    except ValueError:
        raise HttpError(400, f"malformed request line {lines[0][:100]!r}", close=True) from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"malformed header line {line[:100]!r}", close=True)
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return method, path, headers, keep


def allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise HttpError(405, f"method {method} not allowed here; use {' or '.join(allowed)}")


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def json_response(doc: Any) -> tuple[int, bytes, dict[str, str]]:
    return 200, json.dumps(doc, separators=(",", ":")).encode(), {"Content-Type": "application/json"}


__all__ = ["MAX_BODY", "HttpError", "HttpServer", "allow", "error_body", "json_response", "parse_head"]
