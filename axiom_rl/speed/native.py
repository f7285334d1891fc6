"""The decode loop's token step in C++ (decode_step.cpp), for float32 on a CPU.

At a small model's sizes a token step is some 800 ATen calls (views included) on tensors of a
few thousand values, and Python's cost around each call (parsing its arguments, wrapping its
result) is a large part of the step; ATen's own cost around each (dispatch, allocation, setting
up an iterator over a few thousand values) is most of the rest. decode_step.cpp runs the step
with its own kernels: attention reading the KV cache at up to three times the
speed of ATen's batched matmul, and RMSNorm, RoPE, the cache writes and the residual adds as
plain loops (`Speed.decode_own_kernels`). They compute the same products, some summed in another order, so the logits agree
with the Python step's to float32 rounding (about 1e-7 relative), and a sampled token differs
only where a uniform draw falls that close to the edge between two tokens. With its own kernels
off it makes the same ATen calls as rollout/step.py's forward, in the same order, and computes the same
bits. With them and its own linear kernel, where the rows split into shares of four for each
thread (16 rows on 2 cores), each thread takes its share through the whole step
(`Speed.decode_split_rows`)
rather than every kernel splitting its own work by columns: one wake-up of the other thread a
step instead of some 40, and the element-wise work between the kernels split too. The same bits
either way.

The same library holds the rollout's float32 linear layers where the CPU has AVX2 and FMA
(`Speed.decode_linear_kernel`), whichever library runs the training passes' (oneDNN on x86 CPUs not Intel's,
MKL on Intel's: speed/cpu_matmul.py): `linear_panels`, for the few rows of a decode step, where
either library's fixed cost per call is most of the time. Its weights are packed once per
rollout (`pack_panels`), and the Python step and the prefill call it too, so both steps still
compute the same bits. Its sums round like any float32 matmul's (fused multiply-adds), in another
order than oneDNN's or MKL's: a seeded rollout samples other tokens than with either library, and
the same ones run after run, with any number of threads, on AVX2 and AVX-512.

The library also holds the training passes' kernels: the fused SiLU (speed/silu_mul.cpp, used by
speed/activation_memory.py), attention, RMSNorm and rotary embedding (speed/attention.cpp,
rms_norm.cpp, rotary.cpp, each used by the .py of its name), so one build serves all of them.

It is built once per machine, Python and PyTorch version with torch.utils.cpp_extension (a C++
compiler and ninja; 15-40 s on 2 cores), into TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions,
and checked against the Python step on a small random model before the first use. Where it cannot
be built or the check fails, the loop runs the Python step and a warning says why, once.

`AXIOM_RL_DECODE_STEP=python` turns it off; `=native` makes a failed build an error.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError, env_choice
from ..rollout import step
from ..rollout.step import PackedLinear, stacked

ENV = "AXIOM_RL_DECODE_STEP"
CHOICES = ("native", "python")
# One library for axiom-rl's C++ kernels: the decode step, and the training passes' fused SiLU,
# attention, RMSNorm and rotary embedding (activation_memory.py, attention.py, rms_norm.py and
# rotary.py beside this file load them through `op`).
_HERE = Path(__file__).parent
SOURCES = tuple(
    _HERE / name
    for name in ("decode_step.cpp", "silu_mul.cpp", "attention.cpp", "rms_norm.cpp", "rotary.cpp")
)
HEADERS = (_HERE / "vector_ops.h",)  # copied beside the sources, which include it by name
# The attention kernel's loops spread over PyTorch's own OpenMP threads (at::parallel_for), where
# PyTorch runs on OpenMP: pip's Linux wheels carry a libgomp.so.1 that the library then shares.
OPENMP = ("-fopenmp",) if sys.platform.startswith("linux") and torch.backends.openmp.is_available() else ()
# -ffp-contract=off: each product and sum rounded alike in every instruction-set clone of a kernel.
CFLAGS = ("-O3", "-ffp-contract=off", *OPENMP)
_lock = threading.Lock()


def choice() -> str:
    """ "native", "python", or "" (the default: native where it builds)."""
    return env_choice(ENV, CHOICES)


def build_directory() -> Path:
    """Where the built library lives: under TORCH_EXTENSIONS_DIR (as torch's own builds) or
    ~/.cache/torch_extensions, one per Python and PyTorch version (torch's default names no
    PyTorch version, and a library built against another PyTorch would not load), per
    installation of torch, and per content of the sources. They are compiled from copies in that
    directory, so two checkouts of the same code share one build: torch's build file names the
    source's path, and a build shared by checkouts at two paths was rebuilt, silently, whenever
    the other one had last loaded it."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    # torch's headers and libraries are named by their path in the build's commands: a build per
    # installation of torch (a venv), so that two venvs do not rebuild each other's.
    digest = hashlib.sha256(
        b"".join(s.read_bytes() for s in SOURCES + HEADERS)
        + " ".join(CFLAGS).encode()
        + str(Path(torch.__file__).parent).encode()
    ).hexdigest()[:12]
    return Path(root) / f"axiom_rl-{python}-torch{torch.__version__}" / f"decode_step-{digest}"


def use_packaged_ninja() -> None:
    """Put the `ninja` package's binary (a dependency) first on PATH, whatever PATH named first:
    ninja 1.13 and a system's 1.11 each rebuild everything the other built (1-3 minutes on 2
    cores), so a shell with the venv on PATH and one without took turns recompiling the library.
    Without the package, PATH's ninja (or torch's load says that ninja is missing)."""
    try:
        import ninja
    except ImportError:
        return
    if shutil.which("ninja") != str(Path(ninja.BIN_DIR) / "ninja"):
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def _build() -> Callable[..., torch.Tensor]:
    from torch.utils.cpp_extension import load

    use_packaged_ninja()
    where = build_directory()
    where.mkdir(parents=True, exist_ok=True)
    with _builders_lock(where):
        fresh = not any(where.glob("*.so"))
        if fresh:
            print(
                f"axiom-rl: compiling the C++ decode step, once for this machine ({ENV}=python skips it)...",
                file=sys.stderr,
                flush=True,
            )
        started = time.perf_counter()
        for source in SOURCES + HEADERS:
            copy = where / source.name
            if not copy.exists():  # the directory is named by the content: a copy there is this file
                copying = where / f".{source.name}.{os.getpid()}"
                shutil.copyfile(source, copying)
                os.replace(copying, copy)
        with torch_lib_without_spaces(where):
            load(
                "axiom_rl_decode_step",
                sources=[str(where / source.name) for source in SOURCES],
                extra_cflags=list(CFLAGS),
                extra_ldflags=list(OPENMP),
                build_directory=str(where),
                is_python_module=False,
                verbose=False,
            )
        if fresh:
            print(f"axiom-rl: compiled in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return torch.ops.axiom_rl.decode_step


@contextlib.contextmanager
def torch_lib_without_spaces(where: Path) -> Iterator[None]:
    """While torch builds C++: its own library directory named by a path without spaces.

    torch writes `-L<its library directory>` into the link command unquoted (its include paths it
    quotes), both for extensions (cpp_extension.load) and for what torch.compile builds for a
    CPU, so where torch is installed under a path with a space (a venv in "/tmp/my project") the
    link fails. There `where` gets a link to that directory, and torch's builds name the link
    instead for as long as this lasts (in this process: torch.compile's own worker processes
    would not see it)."""
    from torch.utils import cpp_extension

    real = cpp_extension.TORCH_LIB_PATH
    if not any(c.isspace() for c in real) or any(c.isspace() for c in str(where)):
        yield
        return
    link = where / "torch-lib"
    if not (link.is_symlink() and os.readlink(link) == real):
        staged = where / f".torch-lib.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
        staged.symlink_to(real)
        os.replace(staged, link)
    cpp_extension.TORCH_LIB_PATH = str(link)
    try:
        yield
    finally:
        cpp_extension.TORCH_LIB_PATH = real


@contextlib.contextmanager
def _builders_lock(where: Path) -> Iterator[None]:
    """Hold an flock on `where` while torch builds or loads the library there, and clear a lock
    file that torch's own lock left behind. torch marks a build in progress with a plain `lock`
    file, which a process killed mid-build (SIGKILL, the OOM killer) never removes, and every
    later load waits on it forever, silently. The kernel drops an flock with its holder, so a
    process that holds this one knows that no live builder of this directory (all of them take
    it) owns torch's file."""
    with open(where / "axiom_rl.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            stale = where / "lock"
            if stale.exists():
                print(
                    f"axiom-rl: removing {stale}, left by a build that was killed",
                    file=sys.stderr,
                    flush=True,
                )
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


@functools.cache
def _op_and_why() -> tuple[Callable[..., torch.Tensor] | None, str]:
    try:
        op = _build()
    except Exception as e:  # no compiler, no ninja, a build error: the Python step does the same work
        return None, f"could not be built ({first_line(e)})"
    try:
        mismatch = _self_check(op)
    except Exception as e:  # e.g. a PyTorch whose oneDNN linear has another signature
        return None, f"failed its check ({first_line(e)})"
    return (None, f"failed its check ({mismatch})") if mismatch else (op, "")


def op() -> Callable[..., torch.Tensor] | None:
    """The built and checked C++ step, or None (with one warning) where it is not available."""
    if choice() == "python":
        return None
    with _lock:
        built, why = _op_and_why()
    if built is None:
        if choice() == "native":
            raise UserError(f"{ENV}=native, but the C++ decode step {why}")
        _warn_once(why)
    return built


@functools.cache
def available() -> bool:
    """Whether the library is built and loaded here (`op` is not None), asked once: the training
    passes' kernels ask it on every call."""
    return op() is not None


@functools.cache
def _warn_once(why: str) -> None:
    warnings.warn(f"the C++ decode step {why}; decoding with the Python step", stacklevel=4)


def linear_panels(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear for a weight from `pack_panels` (float32, CPU, no autograd)."""
    return torch.ops.axiom_rl.linear_panels(x, packed, bias)


def sample_next(
    logits: torch.Tensor,
    never: int | None,
    blocked: int | None,
    temperature: float,
    top_p: float,
    out: torch.Tensor,
    column: int,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """fast.py's _sample's tokens [N] from `logits` [N, V] once `never` and `blocked` (token ids, or
    None) are made impossible in it, also written into out[:, column]: decode_step.cpp's
    sample_next, the same ATen calls made from C++ (the same bits and the same draws), for the
    loop around the C++ step. With `rows` (increasing), the logits are those rows' [n, V]: their
    tokens go into out[rows, column], the draws are the same, and it returns out[:, column]."""
    return torch.ops.axiom_rl.sample_next(
        logits,
        -1 if never is None else never,
        -1 if blocked is None else blocked,
        temperature,
        top_p,
        out,
        column,
        rows,
    )


def pack_panels(*parts: torch.Tensor) -> torch.Tensor:
    """The weight `parts` stack into ([N_1 + N_2 + ..., K], as torch.cat stacks them: a fused
    q/k/v weight from the three), laid out for `linear_panels`: a tensor of that shape whose values
    are in panel order, so it must never reach any other matmul."""
    return torch.ops.axiom_rl.pack_panels([part.detach() for part in parts])


def _pack_for_onednn(*parts: torch.Tensor) -> torch.Tensor:
    from . import cpu_matmul

    return cpu_matmul.pack(stacked(*parts))


def _packed_linear(panels: bool) -> PackedLinear:
    from . import cpu_matmul

    return (linear_panels, pack_panels) if panels else (cpu_matmul.linear_packed, _pack_for_onednn)


def rollout_linear(onednn: bool, kernel: bool = True) -> PackedLinear | None:
    """(linear, pack) for a rollout's float32 linear layers on a CPU: this library's kernel where
    it is built and the CPU has one for it (`kernel`: Speed.decode_linear_kernel), whichever library the training
    passes use (at a decode step's few rows MKL's fixed cost per call is most of the time too:
    on an Intel Xeon the step benchmark's rollout took 89-92 ms a step through MKL, 68-77 through
    the kernel, in the same invocations); else oneDNN's packed matmul where oneDNN runs the
    model's linear layers (`onednn`: cpu_matmul.applies); else None, F.linear."""
    if kernel and choice() != "python" and op() is not None and torch.ops.axiom_rl.panel_kernel():
        return _packed_linear(True)
    return _packed_linear(False) if onednn else None


def applies(w: Any) -> bool:
    """Whether `w` (rollout/step.py's Weights) is a model the C++ step computes: float32 on a CPU, and no
    per-head query/key norm (Qwen3's, which the C++ step leaves out)."""
    return (
        w.embed.device.type == "cpu"
        and w.embed.dtype == torch.float32
        and all(layer.q_norm is None for layer in w.layers)
    )


def step_for(w: Any, own_kernels: bool = True, split_rows: bool = True) -> Callable[..., torch.Tensor] | None:
    """rollout/step.py's forward's decode step for these weights (rollout/step.py's Weights), in C++: called as
    `step(ids, positions, cache_k, cache_v, start, mask, cos, sin)` with one token per row and
    an additive mask. None where it does not apply or is not available. `own_kernels`,
    `split_rows`: Speed.decode_own_kernels and decode_split_rows."""
    if not applies(w):
        return None
    built = op()
    return None if built is None else _bind(built, w, own_kernels, split_rows)


# decode_step.cpp's kShareRows: fused_step splits a step's rows between the threads where each
# thread's share is a multiple of this many rows.
SHARE_ROWS = 4


def split_unit(w: Any, split_rows: bool = True, own_kernels: bool = True) -> int:
    """The C++ step for these weights (rollout/step.py's Weights) splits its rows between the threads when
    their number is a multiple of this (1: it never does, so any number of rows is alike)."""
    threads = torch.get_num_threads()
    if not (split_rows and own_kernels) or w.linear is not linear_panels or threads <= 1:
        return 1
    return SHARE_ROWS * threads


def _bind(
    built: Callable[..., torch.Tensor], w: Any, own_kernels: bool = True, split_rows: bool = True
) -> Callable[..., torch.Tensor]:
    from . import cpu_matmul

    weights = [
        t for layer in w.layers for t in (layer.ln1, layer.wqkv, layer.wo, layer.ln2, layer.wgu, layer.wdown)
    ]
    biases = [layer.bqkv for layer in w.layers]
    # decode_step.cpp's LinearKind: 0 F.linear, 1 oneDNN, 2 its own kernel.
    kind = {cpu_matmul.linear_packed: 1, linear_panels: 2}.get(w.linear, 0)
    shape = (w.heads, w.kv_heads, w.head_dim, w.eps)
    fixed = (w.embed, w.norm, w.lm_head, weights, biases, *shape, kind, own_kernels)
    # `record`: speed/replay.LinearOutputs.flat(), filled at step `record_at` (decode_step.cpp's keep).
    # `rows_per_prompt`, `prompt_slots`: each run of that many rows holds the same first slots in
    # its caches (a prompt's, for its completions), which the attention kernel then reads once.
    # `rows`: None, or the rows of the batch to compute (int64, increasing: the decode loop leaves
    # out rows that have finished); the step then returns their logits alone.
    return lambda *args, record=(), record_at=0, rows_per_prompt=1, prompt_slots=0, rows=None: built(
        *args, *fixed, list(record), record_at, rows_per_prompt, prompt_slots, split_rows, rows
    )


def _self_check(built: Callable[..., torch.Tensor]) -> str:
    """Run the C++ step and the Python one on a small random Qwen2 (head size 16, which the
    attention kernel covers) with each way this machine may run the linear layers, after checking
    `linear_panels` against F.linear where the CPU has it; returns what differs: "" when the
    panels agree with F.linear to float32 rounding and, without the step's own kernels, the
    steps' logits and caches are the same bits, and with them agree to float32 rounding."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=32, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    generator_state = torch.random.get_rng_state()  # the check must not move the caller's seed
    try:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    panels = bool(torch.ops.axiom_rl.panel_kernel())
    with torch.inference_mode():
        if panels and (mismatch := _check_panels()):
            return mismatch
        for packing in {_packed_linear(False), _packed_linear(panels)}:
            if mismatch := _check_steps(built, step.Weights(model, packing)):
                return mismatch
    return ""


def _check_panels() -> str:
    """linear_panels against F.linear, at shapes with every kind of edge: rows fewer than a tile
    and between tiles, and a last panel narrower than 16 columns."""
    gen = torch.Generator().manual_seed(3)
    for rows, inputs, outputs in ((5, 33, 37), (17, 64, 48), (1, 16, 3)):
        x = torch.randn((rows, inputs), generator=gen)
        weight, bias = torch.randn((outputs, inputs), generator=gen), torch.randn(outputs, generator=gen)
        got = linear_panels(x, pack_panels(weight), bias)
        error = (got - torch.nn.functional.linear(x, weight, bias)).abs().max().item()
        if error > 1e-5 + 1e-4 * got.abs().max().item():
            return f"the linear kernel differs from F.linear by up to {error:.3g}"
    return ""


def _check_steps(built: Callable[..., torch.Tensor], w: Any) -> str:
    """The C++ step against the Python one on the weights `w` (rollout/step.py's Weights)."""
    n, prompt, hd = 3, 5, w.head_dim
    ids = torch.arange(n).view(n, 1) + 7
    positions = torch.full((n, 1), prompt)
    cos, sin = w.rope(prompt + 1, ids.device, torch.float32)
    mask = torch.zeros((n, 1, 1, prompt + 1))
    mask[0, ..., :2] = float("-inf")  # a left-padded row
    cache = torch.randn(
        (2, len(w.layers), n, w.kv_heads, prompt + 1, hd), generator=torch.Generator().manual_seed(1)
    )
    python_k, python_v = cache[0].clone(), cache[1].clone()
    expected = step.forward(w, ids, positions, python_k, python_v, prompt, mask, cos, sin)
    for kernel in (False, True):
        native_k, native_v = cache[0].clone(), cache[1].clone()
        got = _bind(built, w, kernel)(ids, positions, native_k, native_v, prompt, mask, cos, sin)
        same = torch.equal if not kernel else functools.partial(torch.allclose, rtol=1e-4, atol=1e-5)
        what = "with the step's own kernels" if kernel else "with ATen's calls"
        if not same(got, expected):
            return f"logits {what} differ by up to {(got - expected).abs().max().item():.3g}"
        if not (same(native_k, python_k) and same(native_v, python_v)):
            return f"the caches differ {what}"
    return ""
