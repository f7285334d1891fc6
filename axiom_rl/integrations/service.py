"""`axiom-rl sandbox serve`: the sandbox behind HTTP, so that a trainer on one machine can
verify on others (behind any load balancer).

    POST /run_code   SandboxFusion's API for Python (what verl's `sandbox_fusion` client sends):
                     {"code", "language": "python", "stdin", "run_timeout", "memory_limit_MB", ...}
                     -> {"status", "message", "compile_result", "run_result": {"status",
                     "execution_time", "return_code", "stdout", "stderr"}, "files"}
    POST /verify     our batch verification, the `axiom-rl verify` contract: {"problems": [problem,
                     ...], "completions": [{"problem_id", "completion"}, ...], "timeout": S?}
                     -> {"results": [{"problem_id", "reward", "status", "passed", "total",
                     "time_s", "detail"}, ...]}, in the completions' order
    GET  /health     {"status": "ok", "workers", "isolation", "busy", "capacity", "queue", "served"}

Requests run on the server's sandbox pool, `capacity` at once; up to `queue` more wait for a
place; beyond that one is refused at once with 429 and Retry-After (back-pressure: the client
tries another server or again later): nothing is queued without bound. Bodies, code, batches, time and
memory have limits (ServiceLimits); bad input is a 4xx with a one-line reason, and the server
keeps serving. Bound beyond loopback it requires a token (`Authorization: Bearer T`, or
`?token=T` for clients that cannot send headers, such as verl's). SIGINT/SIGTERM: it stops
accepting, finishes the requests under way, closes the sandbox.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..sandbox import Sandbox
from ..types import Problem
from ..verify_files import checked_problem
from .run_code import run_program
from .scoring import Scorer


@dataclass(frozen=True)
class ServiceLimits:
    """What one request may ask for."""

    max_body_bytes: int = 64 * 2**20
    """A request body larger than this is refused (413)."""
    max_code_chars: int = 1 * 2**20
    """A program (/run_code) or completion (/verify) longer than this is refused."""
    max_batch: int = 4096
    """Completions in one /verify request."""
    max_run_timeout: float = 60.0
    """The most CPU seconds a program or submission may be given."""
    max_memory_mb: int = 4096
    """The most memory (MB) /run_code may give a program."""
    max_output_chars: int = 1 * 2**20
    """stdout and stderr returned by /run_code, each cut to this."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BadRequest(Exception):
    """A request the service refuses: its status code and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason[:300]  # a request's own text may be in it


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value:
        raise BadRequest(400, f"{key} must be a positive number, got {value!r}")
    return float(min(value, high))


class SandboxService:
    """The service's state: a sandbox pool, a scorer on it, and the count of requests running."""

    def __init__(
        self,
        workers: int | None = None,
        limits: ServiceLimits = ServiceLimits(),
        token: str | None = None,
        capacity: int | None = None,
        queue: int = 64,
    ) -> None:
        self.limits, self.token = limits, token
        self.sandbox = Sandbox(workers=workers).start()
        self.scorer = Scorer(sandbox=self.sandbox)  # one pool for both endpoints
        self.capacity = capacity or 2 * self.sandbox.workers
        self.queue = queue  # beyond the capacity; busy counts requests running or waiting
        self.busy = 0
        self.served = 0  # requests answered 200 since the start
        self._lock = threading.Lock()
        # The sandbox's calls block: requests run in threads of their own, `capacity` at once.
        self.executor = ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="axiom-serve")

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.scorer.close()
        self.sandbox.close()

    # -- admission -------------------------------------------------------------------------

    def admit(self) -> bool:
        with self._lock:
            if self.busy >= self.capacity + self.queue:
                return False
            self.busy += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.busy -= 1

    def authorised(self, header: str | None, query_token: str | None) -> bool:
        if self.token is None:
            return True
        given = query_token or ""
        if header and header.startswith("Bearer "):
            given = header[len("Bearer ") :]
        return hmac.compare_digest(given.encode(), self.token.encode())

    # -- the endpoints' work (in a thread) ---------------------------------------------------

    def run_code(self, body: dict[str, Any]) -> dict[str, Any]:
        language = body.get("language", "python")
        if language not in ("python", "python3"):
            raise BadRequest(400, f"unsupported language {language!r}: this sandbox runs python")
        code, stdin = body.get("code"), body.get("stdin")
        if not isinstance(code, str):
            raise BadRequest(400, "code must be a string")
        if stdin is not None and not isinstance(stdin, str):
            raise BadRequest(400, "stdin must be a string or null")
        if len(code) > self.limits.max_code_chars or len(stdin or "") > self.limits.max_code_chars:
            raise BadRequest(413, f"code or stdin over {self.limits.max_code_chars} characters")
        if body.get("files"):
            raise BadRequest(400, "files are not supported: put what the program needs in its code or stdin")
        run_timeout = _number(body, "run_timeout", 10.0, 0, self.limits.max_run_timeout)
        memory = int(_number(body, "memory_limit_MB", 1024, 0, self.limits.max_memory_mb))
        return run_program(self.sandbox, code, stdin or "", run_timeout, memory, self.limits.max_output_chars)

    def verify(self, body: dict[str, Any]) -> dict[str, Any]:
        problems_in, completions_in = body.get("problems"), body.get("completions")
        if not isinstance(problems_in, list) or not isinstance(completions_in, list):
            raise BadRequest(400, 'expected {"problems": [...], "completions": [...]}')
        if len(completions_in) > self.limits.max_batch:
            raise BadRequest(
                413, f"{len(completions_in)} completions, over the {self.limits.max_batch} allowed"
            )
        problems: dict[str, Problem] = {}
        for i, value in enumerate(problems_in):
            try:
                problem = checked_problem(value)
            except ValueError as e:
                raise BadRequest(400, f"problems[{i}]: {e}") from None
            problems[problem.id] = problem
        rows: list[tuple[Problem, str]] = []
        for i, c in enumerate(completions_in):
            if not (
                isinstance(c, dict)
                and isinstance(c.get("completion"), str)
                and isinstance(c.get("problem_id"), str)
            ):
                raise BadRequest(
                    400, f'completions[{i}]: expected {{"problem_id": text, "completion": text}}'
                )
            if c.get("problem_id") not in problems:
                raise BadRequest(400, f"completions[{i}]: unknown problem id {c.get('problem_id')!r}")
            if len(c["completion"]) > self.limits.max_code_chars:
                raise BadRequest(413, f"completions[{i}] is over {self.limits.max_code_chars} characters")
            rows.append((problems[c["problem_id"]], c["completion"]))
        timeout = body.get("timeout")
        timeout = None if timeout is None else _number(body, "timeout", 0, 0, self.limits.max_run_timeout)
        scored = self.scorer.score([p for p, _ in rows], [c for _, c in rows], timeout)
        return {
            "results": [
                {"problem_id": p.id, "reward": round(s.reward, 6), **s.verdict.to_dict()}
                for (p, _), s in zip(rows, scored)
            ]
        }

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "workers": self.sandbox.workers,
            "isolation": self.sandbox.isolation,
            "busy": self.busy,
            "capacity": self.capacity,
            "queue": self.queue,
            "served": self.served,
        }


def create_app(service: SandboxService) -> Any:
    """The Starlette application of `service`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def refuse(status: int, reason: str, **headers: str) -> JSONResponse:
        return JSONResponse(
            {"status": "Failed" if status < 500 else "SandboxError", "message": reason, "error": reason},
            status_code=status,
            headers=headers or None,
        )

    async def read_json(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > service.limits.max_body_bytes:
            raise BadRequest(413, f"body over {service.limits.max_body_bytes} bytes")
        body = bytearray()
        async for chunk in request.stream():  # counted as it arrives: a lying content-length too
            body += chunk
            if len(body) > service.limits.max_body_bytes:
                raise BadRequest(413, f"body over {service.limits.max_body_bytes} bytes")
        try:
            value = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise BadRequest(400, f"malformed JSON: {e}") from None
        if not isinstance(value, dict):
            raise BadRequest(400, "expected a JSON object")
        return value

    def endpoint(work: Any) -> Any:
        async def handle(request: Request) -> JSONResponse:
            if not service.authorised(
                request.headers.get("authorization"), request.query_params.get("token")
            ):
                return refuse(401, "missing or wrong token")
            try:
                body = await read_json(request)
            except BadRequest as e:
                return refuse(e.status, e.reason)
            if not service.admit():
                return refuse(
                    429,
                    f"busy: {service.capacity} requests running and {service.queue} waiting; retry later",
                    **{"Retry-After": "1"},
                )
            try:
                loop = asyncio.get_running_loop()
                answer = JSONResponse(await loop.run_in_executor(service.executor, work, body))
                service.served += 1  # (on the event loop's one thread)
                return answer
            except BadRequest as e:
                return refuse(e.status, e.reason)
            except Exception as e:  # ours, not the request's: say so, keep serving
                return refuse(500, f"internal error: {type(e).__name__}: {e}"[:300])
            finally:
                service.release()

        return handle

    async def health(request: Request) -> JSONResponse:
        if not service.authorised(request.headers.get("authorization"), request.query_params.get("token")):
            return refuse(401, "missing or wrong token")
        return JSONResponse(service.health())

    return Starlette(
        routes=[
            Route("/run_code", endpoint(service.run_code), methods=["POST"]),
            Route("/verify", endpoint(service.verify), methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    workers: int | None = None,
    token: str | None = None,
    capacity: int | None = None,
    queue: int = 64,
    limits: ServiceLimits = ServiceLimits(),
    announce: Any = None,
) -> None:
    """Run the service until SIGINT or SIGTERM (then finish what runs and close the sandbox).
    `announce(url, service)` is called once it listens (port 0: a free port, named in the url)."""
    try:
        import uvicorn
    except ImportError:
        raise UserError(
            "the sandbox service needs uvicorn and starlette: pip install 'uvicorn<1' 'starlette<2'"
        ) from None
    if not is_loopback(host) and not token:
        raise UserError(f"serving on {host}, beyond loopback, needs --token (or AXIOM_RL_SANDBOX_TOKEN)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as e:
        listener.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    listener.listen(256)
    service = SandboxService(workers, limits, token, capacity, queue)
    try:
        config = uvicorn.Config(create_app(service), log_level="warning", timeout_graceful_shutdown=120)
        bound = listener.getsockname()[1]
        if announce is not None:
            announce(f"http://{'[' + host + ']' if family == socket.AF_INET6 else host}:{bound}", service)
        # uvicorn stops gracefully on SIGINT and SIGTERM, then raises the signal again with the
        # handler it found: this one, so that the sandbox is closed and the exit is a clean one.
        previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            uvicorn.Server(config).run(sockets=[listener])
        except _Stopped:
            pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        listener.close()
        service.close()


class _Stopped(Exception):
    """SIGINT or SIGTERM, after uvicorn's graceful shutdown."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped()
