"""`axiom-rl sandbox serve` on loopback: verl's own sandbox_fusion client against /run_code, our
batch verification over HTTP (equal to the local sandbox's), bad input, tokens, back-pressure,
four clients at once, and a server killed mid-batch."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from axiom_rl.errors import UserError
from axiom_rl.integrations.remote import RemoteError, RemoteVerifier
from axiom_rl.integrations.service import serve
from axiom_rl.tasks import generate_problems, get_task
from axiom_rl.verifier import verify_many

# a wrong answer that takes 0.1 s of CPU to load, so that a batch of them is still running when
# a server is killed or others wait
SLOW = (
    "```python\nimport time\nt = time.process_time()\nwhile time.process_time() - t < 0.1:\n    pass\n\n"
    "def edit_distance(a, b):\n    return 0\n```"
)


def start_server(*flags: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """A real `axiom-rl sandbox serve` process on a free loopback port, and its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "axiom_rl", "sandbox", "serve", "--port", "0", *flags],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    line = process.stderr.readline()
    if "serving the sandbox on " not in line:
        process.kill()
        raise AssertionError(f"the server did not start: {line}{process.stderr.read()}")
    return process, line.split("serving the sandbox on ")[1].split()[0]


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()


@pytest.fixture(scope="module")
def server():
    process, url = start_server("--workers", "2", "--capacity", "2", "--queue", "2")
    yield url
    stop(process)


def verl_sandbox_fusion(tmp_path_factory):
    """verl's own client (verl/utils/reward_score/sandbox_fusion/utils.py of verl 0.9.1's wheel,
    which `make` downloads into the venv), loaded alone: the rest of verl needs ray and a GPU stack."""
    wheels = sorted((Path(sys.prefix) / "wheels").glob("verl-0.9.1-*.whl"))
    if not wheels:
        pytest.fail(
            "verl's wheel is missing: `make .venv/.installed-dev` downloads it (pip download --no-deps verl==0.9.1)"
        )
    with zipfile.ZipFile(wheels[0]) as wheel:
        source = wheel.read("verl/utils/reward_score/sandbox_fusion/utils.py")
    path = tmp_path_factory.mktemp("verl") / "sandbox_fusion_utils.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("verl_sandbox_fusion_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verls_own_client_gets_correct_verdicts_from_run_code(server, tmp_path_factory):
    client = verl_sandbox_fusion(tmp_path_factory)
    cases = {"inputs": ["1 2\n", "5 7\n", "0 0\n"], "outputs": ["3\n", "12\n", "0\n"]}
    right = "a, b = map(int, input().split())\nprint(a + b)"
    results, _ = client.check_correctness(f"{server}/run_code", cases, right, timeout=5)
    assert results == [True, True, True]
    results, _ = client.check_correctness(
        f"{server}/run_code", cases, "a, b = map(int, input().split())\nprint(a * b)", timeout=5
    )
    assert results == [False, False, True]
    results, meta = client.check_correctness(f"{server}/run_code", cases, "raise ValueError('no')", timeout=5)
    assert results == [-2, -2, -2] and "ValueError: no" in meta[0]["stderr"]
    results, _ = client.check_correctness(
        f"{server}/run_code", {"inputs": [""], "outputs": ["x"]}, "while True: pass", timeout=1
    )
    assert results == [-3]
    # verl's function-call mode: its wrapper reads JSON arguments from stdin
    fn_cases = {"inputs": ['"kitten"\n"sitting"'], "outputs": ["3"], "fn_name": "edit_distance"}
    problem = generate_problems("edit_distance", 1, 1)[0]
    results, _ = client.check_correctness(
        f"{server}/run_code", fn_cases, problem.reference_solution, timeout=5
    )
    assert results == [True]


def test_verification_over_http_equals_the_local_sandbox(server):
    problems = generate_problems("edit_distance", 4, 6) + generate_problems("countdown", 2, 4)
    completions = [get_task(p.task).reference_completion(p) for p in problems]
    completions[1] = "```python\ndef edit_distance(a, b):\n    return len(a)\n```"
    completions[2] = "```python\ndef edit_distance(a, b):\n    return 1/0\n```"
    completions[7] = "<answer> 1 + 1 </answer>"
    local = verify_many(problems, completions)
    with RemoteVerifier(server, chunk=3) as remote:
        got = remote.verify(problems, completions)
    assert [(v.status, v.passed, v.total, v.detail) for v in got] == [
        (v.status, v.passed, v.total, v.detail) for v in local
    ]
    assert {v.status for v in got} >= {"passed", "wrong_answer", "runtime_error"}


def test_bad_requests_get_an_http_error_with_a_reason_and_the_server_keeps_serving(server):
    with httpx.Client(base_url=server) as http:
        for body, status, reason in [
            (b"{not json", 400, "malformed JSON"),
            (b"[1, 2]", 400, "expected a JSON object"),
            (json.dumps({"code": "print(1)", "language": "cpp"}).encode(), 400, "unsupported language"),
            (json.dumps({"code": "print(1)", "run_timeout": -1}).encode(), 400, "run_timeout must be"),
            (json.dumps({"code": "x" * (2**20 + 1)}).encode(), 413, "over 1048576 characters"),
        ]:
            response = http.post("/run_code", content=body)
            assert response.status_code == status and reason in response.json()["message"], response.text
        response = http.post("/verify", json={"problems": [{"id": "x"}], "completions": []})
        assert response.status_code == 400 and "problems[0]: not a problem" in response.json()["message"]
        response = http.post(
            "/verify", json={"problems": [], "completions": [{"problem_id": "nope", "completion": ""}]}
        )
        assert response.status_code == 400 and "unknown problem id 'nope'" in response.json()["message"]
        response = http.post(
            "/verify", json={"problems": [], "completions": [{"problem_id": [1], "completion": ""}]}
        )
        assert response.status_code == 400 and '"problem_id": text' in response.json()["message"]
        # a program's output over the service's limit comes back cut to it, the run otherwise as it was
        answer = http.post("/run_code", json={"code": "print('x' * 3_000_000)"}).json()
        assert answer["run_result"]["return_code"] == 0 and len(answer["run_result"]["stdout"]) == 2**20
        assert http.get("/health").json()["status"] == "ok"


def test_a_token_is_required_when_set_and_beyond_loopback():
    with pytest.raises(UserError, match="beyond loopback, needs --token"):
        serve(host="0.0.0.0", port=0)
    process, url = start_server("--workers", "1", env={"AXIOM_RL_SANDBOX_TOKEN": "s3cret"})
    try:
        assert httpx.get(f"{url}/health").status_code == 401
        assert httpx.get(f"{url}/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(f"{url}/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        response = httpx.post(
            f"{url}/run_code?token=s3cret", json={"code": "print(2)"}
        )  # verl's client: no headers
        assert response.json()["run_result"]["stdout"] == "2\n"
        problem = generate_problems("countdown", 1, 1)[0]
        with RemoteVerifier(url, token="s3cret") as remote:
            assert (
                remote.verify([problem], [f"<answer>{problem.reference_solution}</answer>"])[0].status
                == "passed"
            )
        with RemoteVerifier(url) as remote, pytest.raises(RemoteError, match="HTTP 401"):
            remote.verify([problem], ["x"])
    finally:
        stop(process)


def test_four_clients_at_once_through_back_pressure_lose_nothing_and_count_each_verdict_once(server):
    """Capacity 2 and 2 waiting: four clients sending 4 chunks each at once are told 429 and
    retry; every verdict comes back once, equal to the local sandbox's."""
    problems = generate_problems("edit_distance", 2, 12)
    batches = []
    for k in range(4):
        completions = [
            SLOW if (i + k) % 3 == 0 else get_task(p.task).reference_completion(p)
            for i, p in enumerate(problems)
        ]
        batches.append(completions)
    expected = [[v.status for v in verify_many(problems, c)] for c in batches]
    got: dict[int, list[str]] = {}
    retries = []

    def client(k: int) -> None:
        with RemoteVerifier(server, chunk=2, attempts=200) as remote:
            got[k] = [v.status for v in remote.verify(problems, batches[k])]
            retries.append(remote.retries)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert time.monotonic() - started < 120
    assert [got[k] for k in range(4)] == expected
    assert sum(retries) > 0  # the server did push back


def test_a_server_killed_mid_batch_the_client_finishes_on_the_other():
    first, url_a = start_server("--workers", "1")
    second, url_b = start_server("--workers", "1")
    try:
        problems = generate_problems("edit_distance", 2, 40)
        completions = [
            SLOW if i % 2 else get_task(p.task).reference_completion(p) for i, p in enumerate(problems)
        ]
        expected = [(v.status, v.passed) for v in verify_many(problems, completions)]
        with RemoteVerifier([url_a, url_b], chunk=4, concurrency=2) as remote:
            killer = threading.Timer(0.5, first.kill)
            killer.start()
            got = remote.verify(problems, completions)
            killer.join()
            assert remote.retries > 0
        assert [(v.status, v.passed) for v in got] == expected
        assert first.wait(timeout=10) == -signal.SIGKILL
    finally:
        first.kill()
        stop(second)


def test_a_training_run_verifying_on_the_service_logs_what_a_local_run_logs(server, tmp_path, monkeypatch):
    from axiom_rl import TrainConfig, train_grpo
    from axiom_rl.cli import main

    common = dict(model="tiny", tiny_size="nano", tasks=["edit_distance"], steps=2, prompts_per_step=2,
                  num_generations=2, max_completion_length=16, save_every=0)  # fmt: skip
    local = train_grpo(TrainConfig(**common, output_dir=str(tmp_path / "local")), say=lambda *a: None)
    served = httpx.get(f"{server}/health").json()["served"]
    remote = train_grpo(TrainConfig(**common, sandbox_url=server, output_dir=str(tmp_path / "remote")),
                        say=lambda *a: None)  # fmt: skip
    assert httpx.get(f"{server}/health").json()["served"] >= served + 2  # a request per rollout at least
    timing = ("time", "tok_per_s", "tokens_per_s")
    for a, b in zip(local.metrics, remote.metrics, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith(timing)} == {
            k: v for k, v in b.items() if not k.startswith(timing)
        }
    monkeypatch.setenv("AXIOM_RL_SANDBOX_TOKEN", "not-needed-but-wrong")
    code = main(["train", "--model", "tiny", "--tiny-size", "nano", "--task", "edit_distance", "--steps", "1",
                 "--sandbox-url", "http://127.0.0.1:1", "--output-dir", str(tmp_path / "dead")])  # fmt: skip
    assert code == 2 and not (tmp_path / "dead" / "metrics.jsonl").exists()
