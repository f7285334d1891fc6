"""The sandbox: the only part of axiom-rl that starts processes. Its security policy.

Model-written code is untrusted. It runs in a fresh process per submission, forked from a
long-lived process per worker slot with the interpreter and common modules loaded (server.py's
forker) so a verification does not pay interpreter start-up, and it can only hand back *plain
data*; every judgement is made outside it. Untrusted code never runs in the slot's long-lived
processes, and the process candidates are forked from never holds a job: each job reaches its
candidate in a memory file the candidate reads itself, and the slot's monitor, which reads jobs,
results and output, is never copied into a candidate. So nothing of one submission can reach the
next, in files or in memory: a candidate forked from the monitor could find an earlier
submission's code and returned values in the freed memory it started with (and return what a
correct submission before it had returned).

What is covered (tests/test_sandbox.py checks each item adversarially):
- Isolation, when the kernel allows namespaces (always as root; without root, through an
  unprivileged user namespace): a fresh pid namespace per submission (and a fresh IPC namespace
  where there is no seccomp filter, which otherwise refuses all that one holds), and a network
  namespace with nothing in it but a downed loopback (as root, one per worker slot, reused: an
  unprivileged submission cannot change it, and the previous one's processes are all dead; in a
  user namespace a fresh one per submission, since there it could). It is init of its pid
  namespace, so killing it at the end kills everything it started, daemons that called setsid
  included. /tmp, /var/tmp, /dev/shm and /run/lock are tmpfs mounts of its own, and the only
  places it can write: every other mount is read-only to it, so without root (where it runs as
  the caller's own uid, which may write the caller's files) and as root (world-writable
  directories) nothing outside them changes. As root, they are its worker slot's, mounted once,
  and emptied (their times reset) once every process of a job is dead, before the next job
  starts; it can mount nothing, so it cannot change the slot's mount namespace, which it enters
  as it is, and there it has no /proc (a mount of its own per job cost 11% of HumanEval's
  throughput). Otherwise (in a user namespace, where it could change a mount namespace it
  shared; or when a job needs mounts of its own: another disk limit than the slot's, an
  interpreter under /tmp, a /dev/null that is a plain file) they are fresh per job, in a copy
  of the slot's mount namespace with a /proc that shows only its own processes. Its /dev holds
  null, zero, full, random, urandom and tty alone (and links into /proc where it has one): the host's
  would offer what its permissions reach (without root, the caller's groups: a disk, the
  webcam, keyboards; on some distributions /dev/kvm or the kernel's log for anyone), and a
  read-only mount does not protect a device. Of the host's files it sees only the system's
  (/usr, /bin, /lib, /etc, /sys and the like) and the interpreter's own directories (its
  prefixes: a venv, and the installation it was made from): not home directories, projects,
  data sets, run outputs, or problem files with their expected outputs, which permissions
  alone would not protect (they are usually world-readable, and without root the submission
  runs as their owner). axiom-rl's own package is covered by an empty directory wherever it
  lies in that view (site-packages, after a plain `pip install`): its tasks hold their
  reference solutions. Interpreter directories under a scratch directory (a venv in a clone
  under /tmp) appear elsewhere (/.python/N, and the candidate imports from there), so its /tmp
  holds only what it writes. Its mount namespace is a template prepared once per worker slot (a
  root holding just that, private propagation, read-only, its own /dev), or a copy of it, so the
  per-job set-up is only what must be fresh; the template itself is out of its reach.
- Identity: started as root, each worker slot runs submissions as a uid of its own (from 61000,
  claimed through a lock so that no other slot on the machine, in this pool or another process's,
  runs as it), so a submission can neither write the parent's files, nor signal other processes,
  nor exceed its process limit through another slot. The interpreter's directories are in its
  view even where it could not enter their parents (pyenv under /root; without namespaces,
  through descriptors the monitor opened). no_new_privs is set; the process is not dumpable (no
  ptrace, no /proc/<pid>/mem).
- System calls (syscall_filter.py, a seccomp filter installed last, inherited by everything the
  submission starts, on x86-64 and aarch64): new namespaces, mounts, ptrace and other processes'
  memory, bpf, perf_event_open, userfaultfd, io_uring, key rings, kernel modules, kexec, reboot,
  swap, the clock, and new sockets of any kind (socketpair aside) fail with EPERM, for native
  code as for Python. So do what would let a job reach the job verified beside it: leaving its
  slot's CPU (sched_setaffinity), starting a session, file locks (flock, fcntl's record and
  open-file locks, leases) and watches (inotify, F_NOTIFY) on files both can read; and making
  itself dumpable or changing its core-file limit (kept at 1: no core file, even where the
  host's core pattern pipes to a program). This matters most without root, where a submission is root of its own
  user namespace and could otherwise mount over its view of the tree or open new namespaces;
  and a read-only mount does not stop a connect() to a Unix socket file, such as a Docker
  daemon's (root on the host, for a caller in the docker group) or a desktop session's bus.
- Limits: CPU time per test call (a timer) and per submission (RLIMIT_CPU, kernel-enforced);
  wall-clock limits `wall_factor` times those, for code that sleeps or blocks; address space
  (RLIMIT_AS); processes (RLIMIT_NPROC, 4 by default); file size and tmpfs size; output volume
  (beyond `output_bytes` the submission is killed); the size of the results it sends back, in
  bytes and in decoded values: every line from a candidate is checked against the job's budget
  of values and nesting depth (framing.ValueBudget) before anything of it is decoded, by the
  monitor and the judge alike, so no result can exhaust the decoder's stack or build millions
  of objects in a trusted process. A line past the budget is the submission's failure, with a
  reason, never the verifier's.
- The sandbox's own failures: a worker slot whose monitor dies or stops answering, or whose
  judge crashes, is replaced, and the job run again on the fresh one; only a failure that
  repeats is an `internal_error` (`Sandbox.failures` keeps the last hundred causes). Nothing a
  submission sends reaches a trusted process but plain data within those budgets.
- A scrubbed environment: no variable of the parent leaks in (HOME is the private /tmp).
- Results: the candidate returns values; only plain data (None, bool, int, float, str, bytes,
  list, tuple, dict, set, frozenset) crosses back, subclasses converted to their base type by
  the base type's own methods, so an `__eq__` that is always True never reaches a comparison.
  Expected values never enter the sandbox: comparison (and checkers) run in the trusted parent.
  The parent builds no set or dict of more than 64 distinct values that share one hash (a
  million ints that all hash to 0 would take hours to insert, where no time limit applies):
  decoding refuses them, and so does `set()` in replayed tests (below).
- Assert-style tests (HumanEval `check(candidate)`, MBPP asserts) run in a separate *judge*
  process, where the candidate is an RPC stub. The candidate cannot see the judge (another
  pid namespace) and shares no descriptor with it but the RPC socket. The tests reach the judge
  in a memory file that the monitor passes on unread, so they are never in the monitor's memory
  (which no candidate is a copy of either). Nothing the candidate
  prints, writes to a descriptor, or does to its own process (sys.exit, os._exit, signals) can
  produce a pass: the pass count comes from the judge after the tests ran. Tests that only
  call the candidate with literal arguments, and otherwise hold nothing but constants,
  arithmetic, comparisons and a few builtins (judging.replayable_calls: most of HumanEval and
  MBPP), skip the judge: the candidate answers the known calls in the io mode, as for built-in
  tasks, and the trusted parent runs the same test code over those answers (plain data), so
  neither the tests nor the expected values come near the candidate there either.
- A submission that dies before reporting (exit, signal, kill) has failed the tests it did
  not report. One stuck submission costs its own limits on one worker, never the pool.

What is not covered:
- As root, consecutive jobs of a worker slot use the same scratch tmpfs mounts, emptied between
  them: no file, data or free space carries over, but a file's inode number tells how many files
  the slot's earlier jobs made (a few bits a job could pass to the next: no expected value is
  ever inside a candidate to pass on). Likewise the forker's memory holds the exit statuses of
  the slot's earlier candidates.
- The kernel is shared: a kernel exploit escapes. The seccomp filter refuses the subsystems most
  often exploited, not every system call a program does not need (it is a deny list: the rest of
  the kernel's interface stays open). Where the kernel refuses filters, or on another
  architecture, there is none, and `Sandbox.isolation` says so.
- What is in its view is readable as its permissions allow: world-readable files under /etc,
  and everything in the interpreter's prefixes (keep no problem files or secrets inside a venv).
  On an architecture whose pivot_root number syscall_filter.py does not list (it lists x86-64
  and aarch64), the view is the host's whole tree instead, read-only, with directories its uid
  cannot enter and (without root) the caller's home and runtime ($XDG_RUNTIME_DIR) directories
  covered by an empty tmpfs: there, keep no secrets or problem files with expected outputs in
  world-readable places. Generated problems live in memory only.
- CPU and memory bandwidth are shared: a submission can slow others down (never past their
  wall-clock limits, which are generous for that reason). Where each slot has a CPU of its own
  (one per CPU, the default) a job's processes stay on it; a pool with fewer slots than CPUs is
  not pinned, and there a job's busy processes share the machine with the others'.
- Limits are per process, not per job: no cgroup is made, so a job may use up to `nproc` times
  its memory and CPU limits at once (4 GB with the defaults) until its wall clock ends it.
- Time is shared: a job can tell how busy the machine is (a timing channel between jobs
  verified at once is not closed, only the lock and watch channels are).
- Without namespaces (the kernel refuses them: Ubuntu 24.04 restricts unprivileged user
  namespaces, for one), isolation is weaker, and `Sandbox.isolation` says so. The submission
  shares the host's file system and process list and, without root, runs as the caller's uid.
  What holds it is the kernel's, for native code as for Python. Landlock (landlock_rules.py,
  Linux 5.13+) lets it read only what it would see with namespaces (the system's and the
  interpreter's directories) and its private directory, write only in that directory and run
  no program, and from Linux 6.12 signal no process and reach no abstract Unix socket outside
  itself. The seccomp filter, in a stricter form, refuses execve too, and signals to any
  process but its own. Python audit hooks
  refuse subprocesses, ctypes and sockets besides, and opening axiom-rl's own files (Landlock
  cannot take a directory out of one it allows; native code could get past the hook). Whatever it started dies after it, daemons
  that left its session too (the monitor is their subreaper), and its directory goes with it.
  It can still see the host's processes. On a kernel without Landlock it can read and write
  whatever its uid may, and `Sandbox.isolation` says that too: there, verify as root (a uid of
  its own) or in a container, and keep problem files with expected outputs out of its reach.
- Test code itself (HumanEval's `check`, MBPP's asserts) is trusted input: the judge runs it
  with memory and file limits but with the monitor's identity and no namespaces of its own
  (so that whatever tests import loads as anywhere), in a fresh namespace dict per job but a
  process that lives across jobs. Do not verify against test code you do not trust.
"""

from .pool import (
    DEFAULT_LIMITS,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    decode_value,
    default_sandbox,
    pool_size,
    usable_cpus,
)

__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "decode_value",
    "default_sandbox",
    "pool_size",
    "usable_cpus",
]
