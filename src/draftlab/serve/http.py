"""The HTTP/1.1 front of ``draftlab serve`` on the standard library (no web framework needed).

A thread per connection parses and tokenizes; decoding happens on the engine's single worker, so
a request waits in line while another decodes. Streams use chunked transfer encoding and SSE
``data:`` lines ending with ``data: [DONE]``, like SGLang and vLLM. Bad requests (malformed JSON, wrong
fields, token ids outside the vocabulary, prompts or ``max_tokens`` past the context) get 400 with an
OpenAI-style error body before anything is queued; a client that hangs up mid-stream cancels its decode.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from draftlab.errors import DraftlabError
from draftlab.serve import protocol
from draftlab.serve.engine import Job, ServeEngine

ROUTES = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/generate": "generate"}
MAX_BODY_BYTES = 64 << 20  # a request body past this is refused unread (413)


@dataclass
class ServeContext:
    """What every handler needs: the engine, the tokenizer (None: token ids only), names."""

    engine: ServeEngine
    tokenizer: Any | None
    model_name: str
    model_path: str
    spec: dict[str, int] | None  # num_steps, eagle_topk, num_draft_tokens when speculating
    eos_token_ids: set[int]
    context_len: int | None = None  # the target's max_position_embeddings (None: unlimited)
    vocab_size: int | None = None


class _Output:
    """A request's output so far, with the text detokenized incrementally."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx
        self.ids: list[int] = []
        self.text = ""
        self.verify_ct = 0
        self.correct = 0

    def add(self, tokens: list[int], accept_length: int | None) -> str:
        self.ids += tokens
        if accept_length is not None and self.ctx.spec is not None:
            self.verify_ct += 1
            self.correct += accept_length - 1
        if self.ctx.tokenizer is None:
            return ""
        text = self.ctx.tokenizer.decode(self.ids, skip_special_tokens=True)
        piece = text[len(self.text):]
        self.text = text
        return piece

    def finish(self, job: Job) -> tuple[str, dict[str, Any]]:
        """(OpenAI finish_reason, SGLang finish_reason)."""
        if self.ids and self.ids[-1] in self.ctx.eos_token_ids and not job.ignore_eos:
            return "stop", {"type": "stop", "matched": self.ids[-1]}
        return "length", {"type": "length", "length": len(self.ids)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: a stream is many small writes (headers, then a chunk per commit); with Nagle's algorithm
    # the first chunk waits for the client's delayed ACK of the headers (40 ms on Linux) on every request.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
        pass

    # --- plumbing ----------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        kind = {400: "BadRequestError", 404: "NotFoundError", 413: "BadRequestError"}.get(status, "InternalServerError")
        self._json(status, {"error": {"message": message, "type": kind, "code": status}, "object": "error"})

    def _event(self, obj: Any) -> None:
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # --- routes ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        ctx = self.server.ctx
        path = self.path.split("?")[0]
        if path == "/health":
            self._send(200, b"", "text/plain")
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": ctx.model_name, "object": "model",
                                                         "owned_by": "draftlab", "root": ctx.model_path}]})
        elif path in ("/get_server_info", "/server_info"):
            self._json(200, protocol.server_info(ctx.model_path, ctx.spec, ctx.engine.snapshot()))
        elif path == "/metrics":
            text = protocol.prometheus_metrics(ctx.model_name, ctx.engine.snapshot(), ctx.spec is not None)
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._error(404, f"no route GET {path}")

    def do_POST(self) -> None:
        api = ROUTES.get(self.path.split("?")[0])
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # the body stays unread, so the connection cannot carry another request
            self._error(413 if length > MAX_BODY_BYTES else 400,
                        f"Content-Length must be 0 to {MAX_BODY_BYTES} bytes, got {self.headers.get('Content-Length')}")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, RecursionError):  # JSONDecodeError and bad UTF-8 are ValueErrors; RecursionError: nesting
            self._error(400, "the request body is not valid JSON")
            return
        if api is None:
            self._error(404, f"no route POST {self.path}")
            return
        try:
            request = protocol.parse_request(api, body)
            job = self._job(request)
        except protocol.BadRequest as exc:
            self._error(400, str(exc))
            return
        self._ended = False
        stream = self.server.ctx.engine.submit(job)
        commits = iter(stream)
        try:
            first = next(commits)  # waits in line; a refused prompt fails here, before any header
        except DraftlabError as exc:
            self._error(400, str(exc))
            return
        except RuntimeError as exc:
            self._error(500, str(exc))
            return
        try:
            if request.stream:
                self._stream(request, job, first, commits)
            else:
                self._complete(request, job, first, commits)
        except (BrokenPipeError, ConnectionResetError):
            stream.cancel()  # the client left; the decoder stops at its next commit
            if not self._ended:
                self.server.ctx.engine.finished("abort")
            self.close_connection = True

    def _end(self, reason: str) -> None:
        """Count the request as finished once its decode has ended, before its last bytes leave (a
        client that has read its response finds it counted)."""
        self._ended = True
        self.server.ctx.engine.finished(reason)

    def _job(self, request: protocol.ParsedRequest) -> Job:
        tok = self.server.ctx.tokenizer
        if request.input_ids is not None:
            ids = request.input_ids
        elif tok is None:
            raise protocol.BadRequest("this target folder has no tokenizer; send token ids (input_ids / prompt list)")
        elif request.messages is not None:
            try:
                ids = list(tok.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=True,
                                                   return_dict=False))
            except Exception as exc:  # a template error is the request's fault (bad roles, no template)
                raise protocol.BadRequest(f"cannot apply the chat template: {exc}") from None
        else:
            ids = tok.encode(request.text, add_special_tokens=True)
        protocol.check_tokens(ids, request.max_new_tokens, self.server.ctx.context_len, self.server.ctx.vocab_size)
        return Job(ids, request.max_new_tokens, request.temperature, request.ignore_eos, request.seed)

    def _complete(self, request: protocol.ParsedRequest, job: Job, first: Any, commits: Any) -> None:
        out = _Output(self.server.ctx)
        out.add(first.tokens, first.accept_length)
        for commit in commits:
            out.add(commit.tokens, commit.accept_length)
        final = self._final(request, job, out)
        self._end(out.finish(job)[0])
        self._json(200, final)

    def _final(self, request: protocol.ParsedRequest, job: Job, out: _Output) -> dict[str, Any]:
        ctx = self.server.ctx
        finish, sg_finish = out.finish(job)
        rid = uuid.uuid4().hex
        if request.api == "generate":
            return {"text": out.text, "output_ids": out.ids, "index": 0, "meta_info": self._meta(rid, job, out, sg_finish)}
        use = protocol.usage(len(job.input_ids), len(out.ids))
        return protocol.openai_response(request.api, rid, ctx.model_name, int(time.time()), out.text, finish, use)

    def _meta(self, rid: str, job: Job, out: _Output, finish: dict[str, Any] | None) -> dict[str, Any]:
        ctx = self.server.ctx
        spec = ctx.spec is not None
        return protocol.generate_meta(rid, len(job.input_ids), len(out.ids), finish,
                                      out.verify_ct if spec else None, out.correct if spec else None,
                                      ctx.engine.drafted_per_cycle)

    def _stream(self, request: protocol.ParsedRequest, job: Job, first: Any, commits: Any) -> None:
        ctx = self.server.ctx
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        rid = uuid.uuid4().hex
        created = int(time.time())
        out = _Output(ctx)
        is_first = True
        for commit in itertools.chain([first], commits):  # each chunk leaves as soon as it is committed
            piece = out.add(commit.tokens, commit.accept_length)
            if request.api == "generate":
                self._event({"text": out.text, "output_ids": list(out.ids), "index": 0,
                             "meta_info": self._meta(rid, job, out, None)})
            else:
                self._event(protocol.openai_chunk(request.api, rid, ctx.model_name, created, piece, None,
                                                  first=is_first))
            is_first = False
        finish, sg_finish = out.finish(job)  # the end is known only once the decoder stops
        self._end(finish)
        if request.api == "generate":
            self._event({"text": out.text, "output_ids": list(out.ids), "index": 0,
                         "meta_info": self._meta(rid, job, out, sg_finish)})
        else:
            self._event(protocol.openai_chunk(request.api, rid, ctx.model_name, created, "", finish))
        if request.api != "generate" and request.include_usage:
            use = protocol.usage(len(job.input_ids), len(out.ids))
            self._event(protocol.openai_usage_chunk(request.api, rid, ctx.model_name, created, use))
        self._event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # listen backlog: socketserver's 5 drops connections when many clients arrive at once

    def __init__(self, address: tuple[str, int], ctx: ServeContext) -> None:
        self.ctx = ctx
        super().__init__(address, Handler)

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        """A client that hung up is routine (a benchmark's timeout or Ctrl-C; the handler has already
        cancelled its decode, and closing the connection can fail once more): say nothing. Anything
        else keeps socketserver's report."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            super().handle_error(request, client_address)


def make_server(ctx: ServeContext, host: str, port: int) -> ThreadingHTTPServer:
    """Bind the server (port 0 picks a free one: read ``server_address``); call serve_forever()."""
    try:
        return _Server((host, port), ctx)
    except OSError as exc:
        raise DraftlabError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port or "
                            "--host") from None
    except OverflowError:
        raise DraftlabError(f"cannot listen on port {port}: ports are 0..65535; choose another --port") from None
