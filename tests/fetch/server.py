#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An HTTP/1.1 file server on 127.0.0.1 that misbehaves on command, for the fetch tests.

Usage: server.py ROOT | server.py --proxy UPSTREAM_PORT | server.py --redirect TARGET_PORT |
       server.py --s3loop
Serves ROOT/<name> at /files/<name>; or (--proxy) forwards every request, headers (Host
included: SigV4 signatures stay valid) and body as they are, to 127.0.0.1:UPSTREAM_PORT (an S3
server, SeaweedFS) and misbehaves on its answers as told (see "Proxy mode" below). It binds
port 0 and prints "PORT <n>" on stdout.
Hostile modes: --redirect answers every request (any method) with 307 and
Location: http://127.0.0.1:TARGET_PORT<the same path and query> (a second server, started by the
test, records what arrives); --s3loop is a fake S3 whose listings never end: every
ListObjectsV2, ListMultipartUploads and ListParts page is truncated and names the next marker
m0, m1, m0, m1, ... (part numbers 1, 2, 1, 2, ...), so a client that does not notice a repeated
marker asks forever.
Every request is printed as "REQ <json>" (path, query, Range, If-Range, Accept-Encoding, and
"headers": every request header, name -> value) before it is answered. Commands on stdin, one per line:
  release   let one request paused by ?pause=N continue
  sync      print "SYNC" (every REQ line of a finished request comes before it)
  set PATH QUERY  requests for PATH (e.g. /files/ds/data.mdb) behave as if they carried QUERY
            too (for URLs the test does not write itself: a dataset's files); prints "SET"
  auth PREFIX PARAM VALUE [CODE]  requests for paths starting with PREFIX must carry
            PARAM=VALUE in their own query (a token, or a signature: one PREFIX per object), else
            CODE (default 403, S3's "Request has expired" body; 400: GCS's "ExpiredToken"); a new
            VALUE replaces the old one (re-signing: the old URL expires); the longest matching
            PREFIX rules; prints "AUTH"
Query parameters (counted per path+query; "n" is this request's 0-based index):
  fail=K&code=C[&retry_after=S]  the first K requests get status C with an HTML error body
  cut=B[&cuts=K]                 requests 0..K-1 (K=1) send B body bytes, then the connection
                                 is cut
  stall=B                        request 0 sends B body bytes, then sends nothing forever
  pause=B                        request 0 sends B body bytes, prints "PAUSED", waits for release
  norange=1                      ignore Range: always 200 with the whole file
  badrange=1                     answer a Range request with a 206 one byte off
  encoding=gzip                  label ranged responses Content-Encoding: gzip
  corrupt=K                      the first K requests get the file with one byte flipped
  wrong416=1                     a 416 names the wrong length
  validator=etag|lm|weak|none    which validator to send (default etag, plus Last-Modified)
  nolength=1                     no Content-Length: the body ends when the connection closes
Proxy mode: REQ lines add "method", "if_match", "host" and "token" (an x-amz-security-token
was sent); requests are counted per method +
path + query; the rules of "set PATH QUERY" apply to requests of PATH (the method given by
method=M, default GET; method=* any method):
  fail=K&code=C[&s3code=X][&retry_after=S]  the first K get status C with an S3 error body
                                 <Code>X</Code> (default: SlowDown for 503, ExpiredToken for 403,
                                 InternalError otherwise), without reaching the server
  cut=B[&cuts=K], pause=B        as above, on the server's answer
  cut                            (a command) the request paused by pause=B cuts its connection
                                 instead of going on ("release" lets it go on)
"""
import email.utils
import hashlib
import http.client
import json
import os
import socket
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[1]
COUNTS = {}
LOCK = threading.Lock()
RELEASE = threading.Semaphore(0)
CUT_PAUSED = []  # "cut" was said: the paused request cuts instead of going on
RULES = {}  # path -> query parameters set by "set PATH QUERY"
AUTH = {}  # path prefix -> (param, value, code) set by "auth PREFIX PARAM VALUE [CODE]"
OUT = threading.Lock()


def emit(line):
    with OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle(self):
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            pass  # the client went away (killed, or gave up on a stall): expected here

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        with LOCK:
            q = dict(RULES.get(url.path, {}))
        q.update(urllib.parse.parse_qsl(url.query))
        with LOCK:
            n = COUNTS.get(self.path, 0)
            COUNTS[self.path] = n + 1
        emit("REQ " + json.dumps({
            "path": url.path, "query": url.query, "n": n,
            "range": self.headers.get("Range"), "if_range": self.headers.get("If-Range"),
            "accept_encoding": self.headers.get("Accept-Encoding"),
            "headers": dict(self.headers.items())}))
        with LOCK:
            rules = [p for p in AUTH if url.path.startswith(p)]
            need = AUTH[max(rules, key=len)] if rules else None
        if need and dict(urllib.parse.parse_qsl(url.query)).get(need[0]) != need[1]:
            if need[2] == 400:
                return self.error(400, n, q, b"<Error><Code>ExpiredToken</Code>"
                                  b"<Message>Invalid argument.</Message></Error>")
            return self.error(need[2], n, q, b"<Error><Code>AccessDenied</Code>"
                              b"<Message>Request has expired</Message></Error>")
        name = url.path[len("/files/"):] if url.path.startswith("/files/") else None
        fpath = os.path.join(ROOT, name) if name else None
        if not fpath or not os.path.isfile(fpath):
            return self.error(404, n, q)
        if n < int(q.get("fail", 0)):
            return self.error(int(q.get("code", 503)), n, q)
        with open(fpath, "rb") as f:
            data = f.read()
        etag = '"%s"' % hashlib.sha256(data).hexdigest()[:16]
        last_modified = email.utils.formatdate(os.path.getmtime(fpath), usegmt=True)
        if n < int(q.get("corrupt", 0)) and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        validator = q.get("validator", "etag")
        headers = []
        if validator in ("etag", "weak"):
            headers.append(("ETag", ("W/" if validator == "weak" else "") + etag))
        if validator in ("etag", "lm"):
            headers.append(("Last-Modified", last_modified))

        start = 0
        rng = self.headers.get("Range")
        if rng and not q.get("norange"):
            if_range = self.headers.get("If-Range")
            if if_range is None or if_range in (etag, last_modified):
                start = int(rng[len("bytes="):].split("-")[0])
        if start >= len(data) and start > 0:
            total = len(data) + (5 if q.get("wrong416") else 0)
            self.send_response(416)
            self.send_header("Content-Range", "bytes */%d" % total)
            body = b"<html>416 ERROR PAGE</html>"
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if start > 0:
            self.send_response(206)
            shown = start + (1 if q.get("badrange") else 0)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (shown, len(data) - 1, len(data)))
            if q.get("encoding"):
                self.send_header("Content-Encoding", q["encoding"])
        else:
            self.send_response(200)
        for k, v in headers:
            self.send_header(k, v)
        body = data[start:]
        if q.get("nolength"):
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        limit = None
        for key in ("cut", "stall", "pause"):
            if key in q and n < (int(q.get("cuts", 1)) if key == "cut" else 1):
                limit = int(q[key])
                mode = key
        try:
            if limit is None:
                self.send_body(body)
                return
            self.send_body(body[:limit])
            if mode == "cut":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            elif mode == "stall":
                threading.Event().wait()  # until the process ends; the client gives up first
            else:
                emit("PAUSED " + url.path)
                RELEASE.acquire()
                if CUT_PAUSED:
                    CUT_PAUSED.pop()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_body(body[limit:])
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def send_body(self, body):
        view = memoryview(body)
        for i in range(0, len(view), 1 << 16):
            self.wfile.write(view[i:i + (1 << 16)])
        self.wfile.flush()

    def error(self, code, n, q, body=None):
        body = body or ("<html>ERROR PAGE %d (request %d)</html>" % (code, n)).encode()
        self.send_response(code)
        if "retry_after" in q:
            self.send_header("Retry-After", q["retry_after"])
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


S3_CODES = {503: ("SlowDown", "Please reduce your request rate."),
            403: ("ExpiredToken", "The provided token has expired.")}


class Proxy(Handler):
    """Forwards to the upstream S3 server; misbehaves per "set" rules (see the docstring)."""

    def do_GET(self):
        self.forward()

    def do_HEAD(self):
        self.forward()

    def do_PUT(self):
        self.forward()

    def do_POST(self):
        self.forward()

    def do_DELETE(self):
        self.forward()

    def forward(self):
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length", 0) or 0)
        data = self.rfile.read(length) if length else b""
        with LOCK:
            q = dict(RULES.get(url.path, {}))
            key = self.command + " " + self.path
            n = COUNTS.get(key, 0)
            COUNTS[key] = n + 1
        emit("REQ " + json.dumps({
            "method": self.command, "path": url.path, "query": url.query, "n": n,
            "range": self.headers.get("Range"), "if_range": self.headers.get("If-Range"),
            "if_match": self.headers.get("If-Match"), "host": self.headers.get("Host"),
            "token": self.headers.get("X-Amz-Security-Token") is not None,
            "accept_encoding": self.headers.get("Accept-Encoding"),
            "headers": dict(self.headers.items())}))
        faulty = q.get("method", "GET") in (self.command, "*")
        if faulty and n < int(q.get("fail", 0)):
            code = int(q.get("code", 503))
            s3code, msg = S3_CODES.get(code, ("InternalError", "We encountered an internal error."))
            s3code = q.get("s3code", s3code)
            body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                    "<Message>%s</Message><Resource>%s</Resource></Error>"
                    % (s3code, msg, url.path)).encode()
            return self.answer(code, [("Content-Type", "application/xml")], body,
                               q.get("retry_after"))
        conn = http.client.HTTPConnection("127.0.0.1", UPSTREAM[0], timeout=600)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            conn.putheader(k, v)
        conn.endheaders(data if data else None)
        resp = conn.getresponse()
        body = resp.read()
        headers = [(k, v) for k, v in resp.getheaders()
                   if k.lower() not in ("content-length", "transfer-encoding", "connection")]
        if self.command == "HEAD":
            headers.append(("Content-Length", resp.getheader("Content-Length", "0")))
        conn.close()
        limit, mode = None, None
        for k in ("cut", "pause"):
            if faulty and k in q and n < (int(q.get("cuts", 1)) if k == "cut" else 1):
                limit, mode = int(q[k]), k
        self.answer(resp.status, headers, body, None, limit, mode, url.path)

    def answer(self, code, headers, body, retry_after, limit=None, mode=None, path=""):
        self.send_response_only(code)
        for k, v in headers:
            self.send_header(k, v)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        try:
            if limit is None:
                return self.send_body(body)
            self.send_body(body[:limit])
            if mode == "pause":
                emit("PAUSED " + path)
                RELEASE.acquire()
                if not CUT_PAUSED:
                    return self.send_body(body[limit:])
                CUT_PAUSED.pop()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class Redirect(Handler):
    """Answers every request with 307 to the same path and query on 127.0.0.1:UPSTREAM."""

    def redirect(self):
        length = int(self.headers.get("Content-Length", 0) or 0)
        if length:
            self.rfile.read(length)
        url = urllib.parse.urlsplit(self.path)
        emit("REQ " + json.dumps({"method": self.command, "path": url.path, "query": url.query,
                                  "headers": dict(self.headers.items())}))
        body = b"<html>moved</html>"
        self.send_response(307)
        self.send_header("Location", "http://127.0.0.1:%d%s" % (UPSTREAM[0], self.path))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = redirect


class S3Loop(Handler):
    """A fake S3 whose listings never end (markers cycle m0, m1, m0, ...)."""

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        kind = "uploads" if "uploads" in q else "parts" if "uploadId" in q else "objects"
        with LOCK:  # each kind of listing counts its own pages
            n = COUNTS.get(kind, 0)
            COUNTS[kind] = n + 1
        emit("REQ " + json.dumps({"method": "GET", "path": url.path, "query": url.query, "n": n,
                                  "headers": dict(self.headers.items())}))
        m = "m%d" % (n % 2)
        if "uploads" in q:
            key = url.path.split("/", 2)[2] if url.path.count("/") >= 2 else ""
            key = q.get("prefix", key)
            body = ("<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>"
                    "<NextKeyMarker>%s</NextKeyMarker><NextUploadIdMarker>%s</NextUploadIdMarker>"
                    "<Upload><Key>%s</Key><UploadId>u%d</UploadId>"
                    "<Initiated>2026-01-01T00:00:00Z</Initiated></Upload>"
                    "</ListMultipartUploadsResult>" % (m, m, key, n))
        elif "uploadId" in q:
            body = ("<ListPartsResult><IsTruncated>true</IsTruncated>"
                    "<NextPartNumberMarker>%d</NextPartNumberMarker>"
                    "<Part><PartNumber>%d</PartNumber><Size>1</Size><ETag>\"e\"</ETag></Part>"
                    "</ListPartsResult>" % (n % 2 + 1, n % 2 + 1))
        else:
            body = ("<ListBucketResult><IsTruncated>true</IsTruncated>"
                    "<NextContinuationToken>%s</NextContinuationToken>"
                    "<Contents><Key>k%d</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>"
                    "</ListBucketResult>" % (m, n))
        body = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


UPSTREAM = [0]


def commands():
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "release":
            RELEASE.release()
        elif cmd == "cut":
            CUT_PAUSED.append(True)
            RELEASE.release()
        elif cmd == "sync":
            emit("SYNC")
        elif cmd.startswith("set "):
            _, path, query = (cmd + " ").split(" ", 2)
            with LOCK:
                RULES[path] = dict(urllib.parse.parse_qsl(query.strip()))
            emit("SET")
        elif cmd.startswith("auth "):
            _, prefix, param, value, *code = cmd.split(" ")
            with LOCK:
                AUTH[prefix] = (param, value, int(code[0]) if code else 403)
            emit("AUTH")
    os._exit(0)  # stdin closed: the test is gone


def main():
    handler = Handler
    if ROOT == "--proxy":
        UPSTREAM[0] = int(sys.argv[2])
        handler = Proxy
    elif ROOT == "--redirect":
        UPSTREAM[0] = int(sys.argv[2])
        handler = Redirect
    elif ROOT == "--s3loop":
        handler = S3Loop
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    emit("PORT %d" % server.server_address[1])
    threading.Thread(target=commands, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
