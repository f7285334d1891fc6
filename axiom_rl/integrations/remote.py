"""Verification on other machines: the client of `axiom-rl sandbox serve`'s /verify.

    remote = RemoteVerifier(["http://10.0.0.5:8080", "http://10.0.0.6:8080"], token="...")
    verdicts = remote.verify(problems, completions)     # as verify_many gives them

A batch goes out in chunks, round-robin over the servers, several at once. A chunk whose request
fails (the server is dead or dies mid-request, answers 429 busy or a 5xx) goes to the next
server, up to `attempts` tries, backing off when every server is busy; its verdicts are taken
from the one answer that came back whole, so none is lost or counted twice. A 4xx other than 429
is the request's own fault and ends the batch with its reason.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import UserError
from ..types import STATUSES, Problem, Verdict


class RemoteError(UserError):
    """No server could verify a chunk (after every try), or one refused it as malformed."""


def parse_urls(text: str | Sequence[str]) -> list[str]:
    """'http://a:8080,http://b:8080' (or a list) -> the servers' base URLs; one line if bad."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    urls = [u.strip().rstrip("/") for u in parts if u.strip()]
    if not urls:
        raise UserError("--sandbox-url: give at least one URL, e.g. http://127.0.0.1:8080")
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise UserError(f"--sandbox-url: {u!r} is not an http:// or https:// URL")
    return urls


def _verdict(row: Any, problem_id: str) -> Verdict:
    if not isinstance(row, dict) or row.get("problem_id") != problem_id or row.get("status") not in STATUSES:
        raise ValueError(f"malformed result for {problem_id!r}")
    passed, total = row.get("passed"), row.get("total")
    if not (isinstance(passed, int) and isinstance(total, int) and 0 <= passed <= max(total, 0)):
        raise ValueError(f"malformed counts for {problem_id!r}")
    time_s = row.get("time_s", 0.0)
    return Verdict(
        row["status"],
        passed,
        total,
        float(time_s) if isinstance(time_s, (int, float)) else 0.0,
        str(row.get("detail", ""))[:300],
    )


class RemoteVerifier:
    """Verdicts from sandbox services (`urls`), as verify_many gives them locally."""

    def __init__(
        self,
        urls: str | Sequence[str],
        token: str | None = None,
        chunk: int = 32,
        attempts: int | None = None,
        request_timeout: float = 600.0,
        concurrency: int | None = None,
    ):
        import httpx

        self.urls = parse_urls(urls)
        self.chunk = chunk
        self.attempts = attempts or 3 * len(self.urls)
        self.concurrency = concurrency or 4 * len(self.urls)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(headers=headers, timeout=httpx.Timeout(request_timeout, connect=5.0))
        self._next = itertools.count()
        self._lock = threading.Lock()
        self.retries = 0  # requests sent again after a failure (for reports and tests)

    def verify(
        self, problems: Sequence[Problem], completions: Sequence[str], timeout: float | None = None
    ) -> list[Verdict]:
        if len(problems) != len(completions):
            raise ValueError("problems and completions differ in length")
        starts = range(0, len(problems), self.chunk)
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(starts)))) as pool:
            chunks = pool.map(
                lambda i: self._verify_chunk(
                    problems[i : i + self.chunk], completions[i : i + self.chunk], timeout
                ),
                starts,
            )
            return [verdict for chunk in chunks for verdict in chunk]  # map keeps the chunks' order

    def _verify_chunk(
        self, problems: Sequence[Problem], completions: Sequence[str], timeout: float | None
    ) -> list[Verdict]:
        import httpx

        unique = {p.id: p for p in problems}
        body: dict[str, Any] = {
            "problems": [p.to_dict() for p in unique.values()],
            "completions": [{"problem_id": p.id, "completion": c} for p, c in zip(problems, completions)],
        }
        if timeout is not None:
            body["timeout"] = timeout
        failures: list[str] = []
        for attempt in range(self.attempts):
            with self._lock:
                url = self.urls[next(self._next) % len(self.urls)]
            try:
                response = self.client.post(f"{url}/verify", json=body)
            except httpx.HTTPError as e:  # refused, reset mid-request, timed out: try the next one
                failures.append(f"{url}: {type(e).__name__}: {e}")
            else:
                if response.status_code == 200:
                    try:
                        rows = response.json()["results"]
                        if len(rows) != len(problems):
                            raise ValueError(f"{len(rows)} results for {len(problems)} completions")
                        return [_verdict(r, p.id) for r, p in zip(rows, problems)]
                    except (ValueError, KeyError, TypeError) as e:
                        failures.append(f"{url}: malformed answer ({e})")
                elif response.status_code == 429 or response.status_code >= 500:
                    failures.append(f"{url}: HTTP {response.status_code}")
                    if response.status_code == 429 and (attempt + 1) % len(self.urls) == 0:
                        time.sleep(min(2.0, 0.1 * 2 ** (attempt // len(self.urls))))  # all busy: back off
                else:
                    reason = _reason(response)
                    raise RemoteError(f"{url} refused the batch: HTTP {response.status_code}: {reason}")
            with self._lock:
                self.retries += 1
        raise RemoteError(
            f"no sandbox server verified the batch after {self.attempts} tries; last: {failures[-1]}"
        )

    def check_reachable(self) -> None:
        """One line (UserError) unless at least one server answers /health: before a run starts,
        not at its first rollout."""
        answers = self.health()
        if not any("error" not in a for a in answers):
            raise UserError(
                "no sandbox server answers: " + "; ".join(f"{a['url']}: {a['error']}" for a in answers)[:400]
            )

    def health(self) -> list[dict[str, Any]]:
        """Each server's /health answer (or its error)."""
        import httpx

        out = []
        for url in self.urls:
            try:
                response = self.client.get(f"{url}/health")
                out.append(
                    {"url": url, **response.json()}
                    if response.status_code == 200
                    else {"url": url, "error": f"HTTP {response.status_code}: {_reason(response)}"}
                )
            except (httpx.HTTPError, ValueError) as e:
                out.append({"url": url, "error": f"{type(e).__name__}: {e}"})
        return out

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemoteVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reason(response: Any) -> str:
    try:
        return str(response.json().get("message", ""))[:300]
    except ValueError:
        return response.text[:300]
