"""Process environments: the memory allocator and OpenMP settings a worker process starts with.

Why a dimension of the search: the allocator alone moves a model by -40% to +60% on a CPU, and in a
direction that depends on the model (issue 23: a 2-layer BERT at batch 8 runs 8.2 ms per call with glibc's
default malloc, 5.1 ms with jemalloc or tcmalloc and 5.3 ms with glibc's mmap threshold pinned; resnet18 at
batch 16 runs 1.4x *slower* with jemalloc). Such a setting is fixed when a process starts (``LD_PRELOAD``,
``GLIBC_TUNABLES``, OpenMP's variables are read once), so it cannot be switched inside a worker: the runner
starts one worker per setting (:mod:`autotune.runner`), and a worker refuses a candidate whose name asks for
an environment it was not started in (``AUTOTUNE_ENVIRONMENT``, :func:`check_worker_environment`).

The settings (names as in ``search.environments`` and as modifiers of a variant name: ``frozen+jemalloc``):

- allocators: ``glibc`` (the default, left out of names), ``glibc-tuned`` (glibc with its mmap and trim
  thresholds pinned through ``GLIBC_TUNABLES``: large tensors come from the heap in every process, whatever
  it ran before), ``jemalloc`` and ``tcmalloc`` (``LD_PRELOAD`` of Debian's ``libjemalloc.so.2`` /
  ``libtcmalloc_minimal.so.4``; "unavailable" with the install command where the library is missing);
- OpenMP (opt-in, never in ``"auto"``): ``omp-passive`` / ``omp-active`` set ``OMP_WAIT_POLICY``. torch's
  CPU build uses GNU OpenMP (libgomp), so Intel's ``KMP_BLOCKTIME`` does nothing and is not offered. Whether
  the policy matters depends on whether the deployment shares its cores (spinning threads then cost several
  times the call time; on the shared 2-core machine this was written on no quiet comparison was possible):
  ``benchmarks/bench_environments.py`` measures it, and a recipe names it where it matters.

A name combines at most one allocator and one OpenMP setting with ``+``: ``jemalloc+omp-passive``. No torch
here: the parent resolves names and availability, the worker only reads its own ``AUTOTUNE_ENVIRONMENT``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import InputError, WorkerError

__all__ = [
    "ALLOCATORS",
    "AUTO_ALLOCATORS",
    "DEFAULT",
    "ENVIRONMENT_OPS",
    "ENV_MARKER",
    "LIBRARY_DIRS",
    "OMP_SETTINGS",
    "TUNED_TUNABLES",
    "ProcessEnvironment",
    "check_worker_environment",
    "describe",
    "environment_of_variant",
    "install_hint",
    "python_prelude",
    "resolve_environments",
    "run_script",
    "shell_exports",
]

#: The allocator settings, the default first.
ALLOCATORS: tuple[str, ...] = ("glibc", "glibc-tuned", "jemalloc", "tcmalloc")
#: What ``search.environments = "auto"`` stands for (every allocator whose library is found).
AUTO_ALLOCATORS: tuple[str, ...] = ALLOCATORS
#: OpenMP settings (opt-in) and the ``OMP_WAIT_POLICY`` each sets.
OMP_SETTINGS: dict[str, str] = {"omp-passive": "PASSIVE", "omp-active": "ACTIVE"}
DEFAULT = "glibc"
#: The variable a worker reads to know which environment it was started in.
ENV_MARKER = "AUTOTUNE_ENVIRONMENT"
#: Ops whose timing or product depends on the process environment: the runner sends them to a worker started
#: in their variant's environment, and the worker checks it was.
ENVIRONMENT_OPS: tuple[str, ...] = ("measure", "stage", "artifact")

#: ``glibc-tuned``: large blocks from the heap up to 64 MiB (mmap above), the heap's top given back to the
#: OS only past 128 MiB free. Setting either threshold turns glibc's dynamic threshold off, so the process
#: behaves the same whatever it allocated before (see ARCHITECTURE.md, "Process state").
TUNED_MMAP_THRESHOLD = 64 * 1024 * 1024
TUNED_TRIM_THRESHOLD = 128 * 1024 * 1024
TUNED_TUNABLES = (f"glibc.malloc.mmap_threshold={TUNED_MMAP_THRESHOLD}:"
                  f"glibc.malloc.trim_threshold={TUNED_TRIM_THRESHOLD}")
_MALLOC_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")

#: Where Debian/Ubuntu (multiarch), Fedora and source installs put shared libraries.
LIBRARY_DIRS: tuple[str, ...] = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                                 "/usr/lib", "/usr/local/lib")
#: allocator -> (shared library preloaded, Debian package that has it)
PRELOADS: dict[str, tuple[str, str]] = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
_PRELOAD_PREFIXES = ("libjemalloc", "libtcmalloc")


def install_hint(allocator: str) -> str:
    """The command that installs ``allocator``'s library on Debian/Ubuntu."""
    return f"apt-get install {PRELOADS[allocator][1]}" if allocator in PRELOADS else ""


@dataclass(frozen=True)
class ProcessEnvironment:
    """One process environment: an allocator and, optionally, an OpenMP wait policy."""

    allocator: str = DEFAULT
    omp: str | None = None

    def __post_init__(self) -> None:
        if self.allocator not in ALLOCATORS:
            raise InputError(f"environment: unknown allocator {self.allocator!r}; allowed: {', '.join(ALLOCATORS)}")
        if self.omp is not None and self.omp not in OMP_SETTINGS:
            raise InputError(f"environment: unknown OpenMP setting {self.omp!r}; allowed: {', '.join(OMP_SETTINGS)}")

    @property
    def is_default(self) -> bool:
        return self.allocator == DEFAULT and self.omp is None

    @property
    def modifiers(self) -> tuple[str, ...]:
        """The tokens a variant name carries (the default allocator left out): ``("jemalloc",)``."""
        return tuple(t for t in (None if self.allocator == DEFAULT else self.allocator, self.omp) if t)

    @property
    def name(self) -> str:
        """``glibc``, ``jemalloc``, ``glibc+omp-passive``, ``tcmalloc+omp-active``."""
        return "+".join((self.allocator, *(() if self.omp is None else (self.omp,))))

    @classmethod
    def parse(cls, text: str, *, field: str = "search.environments") -> ProcessEnvironment:
        """Read ``ALLOCATOR[+OMP]`` (either part may be left out; both default)."""
        allocator: str | None = None
        omp: str | None = None
        tokens = [t.strip().lower() for t in str(text).split("+")]
        for tok in tokens:
            if tok in ALLOCATORS and allocator is None:
                allocator = tok
            elif tok in OMP_SETTINGS and omp is None:
                omp = tok
            elif tok in ALLOCATORS or tok in OMP_SETTINGS:
                raise InputError(f"{field}: '{text}' names two allocators or two OpenMP settings; "
                                 "give at most one of each")
            else:
                raise InputError(f"{field}: unknown environment '{tok}' in '{text}'; allowed: "
                                 f"{', '.join(ALLOCATORS)}, optionally with +{' or +'.join(OMP_SETTINGS)}, "
                                 "or \"auto\"")
        return cls(allocator=allocator or DEFAULT, omp=omp)

    def library(self, dirs: Sequence[str] = LIBRARY_DIRS) -> Path | None:
        """The allocator's shared library found on this machine (None for glibc, or when missing)."""
        if self.allocator not in PRELOADS:
            return None
        lib = PRELOADS[self.allocator][0]
        for d in dirs:
            path = Path(d) / lib
            if path.exists():
                return path
        return None

    def unavailable_reason(self, dirs: Sequence[str] = LIBRARY_DIRS) -> str | None:
        """Why this environment cannot run here (its library missing, with the install command), or None."""
        if self.allocator in PRELOADS and self.library(dirs) is None:
            lib = PRELOADS[self.allocator][0]
            return (f"{lib} not found in {', '.join(dirs)}; install it with "
                    f"`{install_hint(self.allocator)}` (or `make install` as root)")
        return None

    def variables(self, dirs: Sequence[str] = LIBRARY_DIRS) -> dict[str, str]:
        """The variables this environment sets (``LD_PRELOAD``, ``GLIBC_TUNABLES``, ``OMP_WAIT_POLICY``)."""
        out: dict[str, str] = {}
        lib = self.library(dirs)
        if lib is not None:
            out["LD_PRELOAD"] = str(lib)
        if self.allocator == "glibc-tuned":
            out["GLIBC_TUNABLES"] = TUNED_TUNABLES
        if self.omp is not None:
            out["OMP_WAIT_POLICY"] = OMP_SETTINGS[self.omp]
        return out

    def apply(self, base: Mapping[str, str], dirs: Sequence[str] = LIBRARY_DIRS) -> dict[str, str]:
        """``base`` (a process environment) set up for this one: allocator preloads and malloc tunables the
        parent may carry are removed first, so ``glibc`` really is glibc; then this setting's variables added
        (a preload goes first in ``LD_PRELOAD``). Raises :class:`InputError` when the library is missing."""
        reason = self.unavailable_reason(dirs)
        if reason is not None:
            raise InputError(f"environment '{self.name}': {reason}")
        env = dict(base)
        preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
                   if not Path(p).name.startswith(_PRELOAD_PREFIXES)]
        tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":")
                    if t and t.split("=", 1)[0] not in _MALLOC_TUNABLES]
        add = self.variables(dirs)
        if "LD_PRELOAD" in add:
            preload.insert(0, add["LD_PRELOAD"])
        if "GLIBC_TUNABLES" in add:
            tunables.insert(0, add["GLIBC_TUNABLES"])
        for key, parts, sep in (("LD_PRELOAD", preload, " "), ("GLIBC_TUNABLES", tunables, ":")):
            if parts:
                env[key] = sep.join(parts)
            else:
                env.pop(key, None)
        if self.omp is not None:
            env["OMP_WAIT_POLICY"] = OMP_SETTINGS[self.omp]
        env[ENV_MARKER] = self.name
        return env


def resolve_environments(selection: Sequence[str] | str, dirs: Sequence[str] = LIBRARY_DIRS
                         ) -> tuple[tuple[ProcessEnvironment, ...], tuple[tuple[str, str], ...]]:
    """``search.environments`` -> (the environments available here, [(name, why not)] for the others).

    ``"auto"`` is every allocator of :data:`AUTO_ALLOCATORS` with OpenMP's defaults. Order is kept, the default
    (glibc) always comes first when present, duplicates are dropped.
    """
    names = list(AUTO_ALLOCATORS) if selection == "auto" else list(selection)
    envs = list(dict.fromkeys(ProcessEnvironment.parse(n) for n in names))
    envs.sort(key=lambda e: not e.is_default)
    ok: list[ProcessEnvironment] = []
    missing: list[tuple[str, str]] = []
    for env in envs:
        reason = env.unavailable_reason(dirs)
        if reason is None:
            ok.append(env)
        else:
            missing.append((env.name, reason))
    return tuple(ok), tuple(missing)


def shell_exports(env: ProcessEnvironment) -> list[str]:
    """Shell lines (for ``run.sh`` and the reproduction script) that set ``env`` up in a POSIX shell:
    the allocator's library looked up on the deployment machine, failing with the install command."""
    lines = ["unset GLIBC_TUNABLES LD_PRELOAD" if env.allocator == DEFAULT else ""]
    if env.allocator in PRELOADS:
        lib, pkg = PRELOADS[env.allocator]
        dirs = " ".join(LIBRARY_DIRS)
        lines += [
            f'AUTOTUNE_LIB=""; for d in {dirs}; do [ -e "$d/{lib}" ] && AUTOTUNE_LIB="$d/{lib}" && break; done',
            f'[ -n "$AUTOTUNE_LIB" ] || {{ echo "{lib} not found: apt-get install {pkg}" >&2; exit 1; }}',
            'export LD_PRELOAD="$AUTOTUNE_LIB"',
            "unset GLIBC_TUNABLES",
        ]
    if env.allocator == "glibc-tuned":
        lines += ["unset LD_PRELOAD", f"export GLIBC_TUNABLES={TUNED_TUNABLES}"]
    if env.omp is not None:
        lines.append(f"export OMP_WAIT_POLICY={OMP_SETTINGS[env.omp]}")
    return [line for line in lines if line]


def environment_of_variant(variant: str) -> ProcessEnvironment:
    """The process environment a variant name asks for (its allocator and OpenMP modifiers; default when none).

    Reads only those tokens, so it never rejects a name the worker would judge (the worker parses it fully).
    """
    parts = [t.strip().lower() for t in variant.split("+")[1:]]
    return ProcessEnvironment.parse("+".join(t for t in parts if t in ALLOCATORS or t in OMP_SETTINGS) or DEFAULT,
                                    field="variant")


def describe(env: ProcessEnvironment) -> str:
    """One line for people: what the environment is and how it is set."""
    parts = {"glibc": "glibc's default malloc", "glibc-tuned": f"glibc malloc with GLIBC_TUNABLES={TUNED_TUNABLES}",
             "jemalloc": f"jemalloc (LD_PRELOAD of {PRELOADS['jemalloc'][0]})",
             "tcmalloc": f"tcmalloc (LD_PRELOAD of {PRELOADS['tcmalloc'][0]})"}[env.allocator]
    if env.omp is not None:
        parts += f", OMP_WAIT_POLICY={OMP_SETTINGS[env.omp]}"
    return parts


def run_script(env: ProcessEnvironment, *, default_command: str,
               commands: Mapping[str, tuple[str, str]] | None = None) -> str:
    """``run.sh``: set ``env`` up, then run the arguments (a service) or ``default_command`` in it.

    ``commands``: named sub-commands, ``{"serve": (command, usage text)}``: ``./run.sh serve --port 8000`` runs
    ``command`` with the remaining arguments (the artifact's server, :mod:`autotune.serving.server`).
    """
    named = dict(commands or {})
    usage = [f"#        ./run.sh {name} ...{' ' * max(1, 20 - len(name))}{text}" for name, (_, text) in named.items()]
    cases = [line for name, (command, _) in named.items()
             for line in (f'if [ "${{1:-}}" = {name} ]; then', "  shift", f'  exec {command} "$@"', "fi")]
    return "\n".join(line for line in [
        "#!/bin/sh",
        "# Starts a process in the environment autotune measured the recommendation in:",
        f"#   {env.name}: {describe(env)}.",
        "# Such settings are read when a process starts, so they cannot be set from Python.",
        "# Usage: ./run.sh                      runs load.py (one batch) in that environment",
        *usage,
        "#        ./run.sh python service.py    runs your own service in it",
        "set -e",
        *shell_exports(env),
        f"export {ENV_MARKER}={env.name}",
        'if [ "$#" -eq 0 ]; then',
        f'  exec {default_command}',
        "fi",
        *cases,
        'exec "$@"',
    ] if line) + "\n"


def python_prelude(env: ProcessEnvironment) -> list[str]:
    """Lines for the top of a script run as ``python script.py``: when the process was not started in ``env``,
    start it again (``os.execve``, once) with ``env``'s variables. Nothing for the default environment."""
    if env.is_default:
        return []
    lines = [
        f"# autotune measured this in the process environment '{env.name}': {describe(env)}.",
        "# It must be set before the process starts; run as a script, this block starts it again once with it.",
        "import os",
        "import sys",
        "",
        f"ENVIRONMENT = {env.name!r}",
        "",
        "",
        "def _environment():",
        f"    env = dict(os.environ, {ENV_MARKER}=ENVIRONMENT)",
    ]
    if env.allocator in PRELOADS:
        lib, pkg = PRELOADS[env.allocator]
        lines += [
            f"    found = [os.path.join(d, {lib!r}) for d in {list(LIBRARY_DIRS)!r}",
            f"             if os.path.exists(os.path.join(d, {lib!r}))]",
            "    if not found:",
            f"        raise SystemExit({lib + ' not found: apt-get install ' + pkg!r})",
            '    env["LD_PRELOAD"] = found[0]',
            '    env.pop("GLIBC_TUNABLES", None)',
        ]
    elif env.allocator == "glibc-tuned":
        lines += ['    env.pop("LD_PRELOAD", None)', f'    env["GLIBC_TUNABLES"] = {TUNED_TUNABLES!r}']
    if env.omp is not None:
        lines.append(f'    env["OMP_WAIT_POLICY"] = {OMP_SETTINGS[env.omp]!r}')
    lines += [
        "    return env",
        "",
        "",
        f'if __name__ == "__main__" and os.environ.get({ENV_MARKER!r}) != ENVIRONMENT:',
        "    os.execve(sys.executable, [sys.executable, *sys.argv], _environment())",
        "",
    ]
    return lines


def check_worker_environment(wanted: str, *, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`WorkerError` when this process was not started in the environment ``wanted`` names
    (the candidate fails; the run goes on).

    A worker started without the marker (by hand, or by an older parent) counts as the default environment.
    """
    have = (os.environ if environ is None else environ).get(ENV_MARKER, DEFAULT)
    if ProcessEnvironment.parse(have, field=ENV_MARKER) != ProcessEnvironment.parse(wanted, field="variant"):
        raise WorkerError(f"variant asks for process environment '{wanted}' but this worker was started in "
                         f"'{have}': a candidate is only measured in the environment it names")
