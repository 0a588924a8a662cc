"""A local stand-in for the Hugging Face Hub, enough for the real `huggingface_hub` client.

Two threads on 127.0.0.1 with random ports: the "hub" (API and `resolve/` URLs) and a "CDN" on another
origin, as on the real Hub, where LFS files are redirected to signed storage URLs: huggingface_hub
then takes the file's metadata from the redirect itself (X-Repo-Commit, X-Linked-Etag = the LFS
SHA-256, X-Linked-Size) and must not send the token to the CDN. What huggingface_hub 2.4.0 was seen to
request (`FakeHub.log` records it): `GET /api/models?filter=gguf&search=..&sort=downloads&limit=..`,
`GET /api/models/{repo}?blobs=true`, `HEAD /{repo}/resolve/main/{file}` (a redirect to another
origin is not followed), `GET` of the CDN URL, with `Range: bytes=N-` when resuming, and a last
`HEAD` when `hf_hub_download` links the verified blob into the cache's snapshot.

Errors carry the Hub's `X-Error-Code` header (RepoNotFound, EntryNotFound, RevisionNotFound,
GatedRepo), which is how huggingface_hub tells them apart. Knobs for the tests: `drop_after` (close
the connection after N body bytes, once), `corrupt` (serve flipped bytes under the original hash),
`tokens` (the tokens a gated repository accepts).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

_CHUNK = 1 << 20


@dataclass
class RepoFile:
    name: str
    size: int
    sha256: str
    git_oid: str  # git blob id of the file (small files) or of its LFS pointer
    lfs: bool
    path: Path | None = None
    data: bytes | None = None

    def read(self, start: int) -> bytes:
        if self.data is not None:
            return self.data[start:]
        raise RuntimeError("use chunks() for files on disk")


@dataclass
class FakeRepo:
    repo_id: str
    commit: str
    files: dict[str, RepoFile]
    gated: bool = False
    downloads: int = 0


@dataclass
class Logged:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    authorization: bool
    query: str = ""
    status: int = 0
    body_bytes: int = 0


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    log: list[Logged] = field(default_factory=list)
    drop_after: int | None = None  # one-shot: cut the next file body after this many bytes
    corrupt: set[str] = field(default_factory=set)  # LFS sha256s served with one byte flipped
    tokens: set[str] = field(default_factory=lambda: {"hf_test_granted"})
    chunk_delay: float = 0.0  # seconds to wait after each 1 MB of a file body (a slow network)
    url: str = ""
    cdn_url: str = ""
    _servers: list[ThreadingHTTPServer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- set-up ---------------------------------------------------------------------------------

    def add_repo(
        self, repo_id: str, files: dict[str, Path | bytes], gated: bool = False, downloads: int = 0
    ) -> FakeRepo:
        entries = {}
        for name, content in files.items():
            if isinstance(content, Path):
                size, sha = content.stat().st_size, _sha256_file(content)
                entries[name] = RepoFile(name, size, sha, _pointer_oid(sha, size), True, path=content)
            else:
                sha = hashlib.sha256(content).hexdigest()
                lfs = name.endswith(".gguf")
                oid = _pointer_oid(sha, len(content)) if lfs else _git_oid(content)
                entries[name] = RepoFile(name, len(content), sha, oid, lfs, data=content)
        commit = hashlib.sha1(repo_id.encode() + b"".join(f.sha256.encode() for f in entries.values())).hexdigest()
        repo = FakeRepo(repo_id, commit, entries, gated, downloads)
        self.repos[repo_id] = repo
        return repo

    def start(self) -> FakeHub:
        for role in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, role))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, name=f"fake-{role}", daemon=True).start()
            self._servers.append(server)
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    # --- inspection -----------------------------------------------------------------------------

    def requests(self, server: str | None = None, method: str | None = None) -> list[Logged]:
        with self._lock:
            return [
                e for e in self.log if (server is None or e.server == server) and (method is None or e.method == method)
            ]

    def body_bytes(self, server: str = "cdn") -> int:
        return sum(e.body_bytes for e in self.requests(server, "GET"))

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    def record(self, entry: Logged) -> None:
        with self._lock:
            self.log.append(entry)

    def find_lfs(self, sha: str) -> RepoFile | None:
        return next((f for r in self.repos.values() for f in r.files.values() if f.sha256 == sha), None)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * _CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _pointer_oid(sha: str, size: int) -> str:
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {size}\n".encode()
    return _git_oid(pointer)


def _handler(hub: FakeHub, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            self._route()

        def do_GET(self) -> None:  # noqa: N802
            self._route()

        # --- routing ----------------------------------------------------------------------------

        def _route(self) -> None:
            url = urlparse(self.path)
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            self.entry = Logged(role, self.command, url.path, self.headers.get("Range"),
                                "authorization" in {k.lower() for k in self.headers}, url.query)  # fmt: skip
            hub.record(self.entry)
            try:
                if role == "cdn" and len(parts) == 2 and parts[0] == "lfs":
                    self._lfs(parts[1])
                elif role == "hub" and url.path == "/api/models":
                    self._search(parse_qs(url.query))
                elif role == "hub" and parts[:2] == ["api", "models"] and len(parts) >= 4:
                    self._info("/".join(parts[2:4]), parts[5] if len(parts) > 5 and parts[4] == "revision" else None)
                elif role == "hub" and len(parts) >= 5 and parts[2] == "resolve":
                    self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
                else:
                    self._error(404, None, "Not found")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client went away (cancelled): nothing to answer

        def _search(self, query: dict[str, list[str]]) -> None:
            text = (query.get("search") or [""])[0].lower()
            want_gguf = "gguf" in query.get("filter", [])
            found = [
                r for r in hub.repos.values()
                if text in r.repo_id.lower() and (not want_gguf or any(n.endswith(".gguf") for n in r.files))
            ]  # fmt: skip
            found.sort(key=lambda r: -r.downloads)
            limit = int((query.get("limit") or ["1000"])[0])
            self._json([self._summary(r) for r in found[:limit]])

        def _summary(self, r: FakeRepo) -> dict[str, object]:
            return {"_id": r.commit[:24], "id": r.repo_id, "modelId": r.repo_id, "likes": 0, "private": False,
                    "downloads": r.downloads, "tags": ["gguf"], "gated": "manual" if r.gated else False,
                    "lastModified": "2025-01-01T00:00:00.000Z", "sha": r.commit}  # fmt: skip

        def _info(self, repo_id: str, revision: str | None) -> None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found")
            if revision not in (None, "main", repo.commit):
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            siblings = []
            for f in repo.files.values():
                entry: dict[str, object] = {"rfilename": f.name, "size": f.size, "blobId": f.git_oid}
                if f.lfs:
                    entry["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": 134}
                siblings.append(entry)
            self._json({**self._summary(repo), "siblings": siblings})

        def _resolve(self, repo_id: str, revision: str, filename: str) -> None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found")
            if repo.gated and self._token() not in hub.tokens:
                return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have "
                                   "access to it and be authenticated to access it. Please log in.")  # fmt: skip
            if revision not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            f = repo.files.get(filename)
            if f is None:
                return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.commit})
            common = {"X-Repo-Commit": repo.commit, "ETag": f'"{f.git_oid}"', "Accept-Ranges": "bytes"}
            if f.lfs:
                location = f"{hub.cdn_url}/lfs/{f.sha256}?repo={repo_id}&file={filename}"
                self._send(302, {**common, "Location": location, "X-Linked-Etag": f'"{f.sha256}"',
                                 "X-Linked-Size": str(f.size), "Content-Length": "0"})  # fmt: skip
                return None
            self._send(200, {**common, "Content-Length": str(f.size)})
            if self.command == "GET":
                self._write(f.read(0))
            return None

        def _lfs(self, sha: str) -> None:
            f = hub.find_lfs(sha)
            if f is None:
                return self._error(404, None, "No such object")
            start = 0
            header = self.headers.get("Range")
            if header and header.startswith("bytes=") and header.endswith("-"):
                start = int(header[6:-1])
            if start >= f.size and f.size:
                return self._send(416, {"Content-Range": f"bytes */{f.size}", "Content-Length": "0"})
            headers = {"Content-Length": str(f.size - start), "ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}  # fmt: skip
            if start:
                headers["Content-Range"] = f"bytes {start}-{f.size - 1}/{f.size}"
            self._send(206 if start else 200, headers)
            if self.command == "GET":
                self._stream(f, start)
            return None

        # --- output -----------------------------------------------------------------------------

        def _stream(self, f: RepoFile, start: int) -> None:
            with hub._lock:
                drop, hub.drop_after = hub.drop_after, None
            flip = f.size // 2 if f.sha256 in hub.corrupt else -1
            pos = start
            source = open(f.path, "rb") if f.path else None  # noqa: SIM115 - closed below
            try:
                if source:
                    source.seek(start)
                while pos < f.size:
                    chunk = source.read(_CHUNK) if source else (f.data or b"")[pos : pos + _CHUNK]
                    if not chunk:
                        break
                    if pos <= flip < pos + len(chunk):
                        i = flip - pos
                        chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1 :]
                    if drop is not None and pos - start + len(chunk) >= drop:
                        self._write(chunk[: drop - (pos - start)])
                        self.wfile.flush()
                        with contextlib.suppress(OSError):
                            self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    self._write(chunk)
                    pos += len(chunk)
                    if hub.chunk_delay:
                        time.sleep(hub.chunk_delay)
            finally:
                if source:
                    source.close()

        def _write(self, data: bytes) -> None:
            self.wfile.write(data)
            self.entry.body_bytes += len(data)

        def _send(self, status: int, headers: dict[str, str]) -> None:
            self.entry.status = status
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()

        def _json(self, data: object) -> None:
            body = json.dumps(data).encode()
            self._send(200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
            if self.command == "GET":
                self._write(body)

        def _error(self, status: int, code: str | None, message: str, extra: dict[str, str] | None = None) -> None:
            body = json.dumps({"error": message}).encode()
            headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(extra or {})}
            if code:
                headers["X-Error-Code"] = code
            headers["X-Error-Message"] = message
            self._send(status, headers)
            if self.command == "GET":
                self._write(body)

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization") or ""
            return auth[7:] if auth.lower().startswith("bearer ") else None

    return Handler
