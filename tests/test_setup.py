"""The README's set-up for a user on another machine, without a GPU: torch's CPU build first, pinned to the version
the book is tested with, then the package and its extras; and `make venv` (tools/venv.sh), which does the same.

Nothing here reaches a network: the README's commands are read, not run; tools/venv.sh runs against a fake `pip`
that records its arguments; the editable install goes into a fresh environment with `--no-index`.
"""
import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CFG = configparser.ConfigParser(delimiters=["="])
CFG.read(ROOT / "settings.ini", encoding="utf-8")
CFG = CFG["DEFAULT"]


def torch_pin() -> str:
    "The version of the `torch==` line of tools/constraints.txt, the one place torch is pinned"
    pins = re.findall(r"^torch==(\S+)$", (ROOT / "tools" / "constraints.txt").read_text(), re.M)
    assert len(pins) == 1, f"tools/constraints.txt pins torch {len(pins)} times"
    return pins[0]


def shell_commands(markdown: str) -> list[list[list[str]]]:
    "The commands of every ```sh block, block by block, each split as the shell would (comments dropped)"
    blocks = re.findall(r"^```sh\n(.*?)^```", markdown, re.M | re.S)
    out = []
    for block in blocks:
        cmds = []
        for line in block.replace("\\\n", " ").splitlines():          # lines continued by a backslash
            for part in re.split(r"&&|;", line):
                words = shlex.split(part, comments=True)
                if words: cmds.append(words)
        out.append(cmds)
    return out


def pip_installs(markdown: str) -> list[list[str]]:
    "The arguments of every `pip install` of the README: in its shell blocks and in its inline code"
    cmds = [c for block in shell_commands(markdown) for c in block]
    cmds += [shlex.split(code) for code in re.findall(r"`(pip install [^`]+)`", markdown)]
    return [c[2:] for c in cmds if c[:2] == ["pip", "install"]]


def extras_of_setup() -> set[str]:
    "The extras setup.py declares (its extras_require, each read from settings.ini)"
    m = re.search(r"extras_require=\{(.*?)\}", (ROOT / "setup.py").read_text(), re.S)
    return set(re.findall(r"'(\w+)':", m.group(1)))


def test_the_readers_of_the_readme_are_not_vacuous():
    "The parsers find what the README says: its shell blocks, its pip commands, and setup.py's extras."
    assert shell_commands("```sh\ncd x && pip install -e '.[a]'   # b\n```\n") == [
        [["cd", "x"], ["pip", "install", "-e", ".[a]"]]]
    assert len(pip_installs(README)) >= 6
    assert extras_of_setup() == {"dev", "plot", "exercises", "numbers", "bench", "modern"}


def test_readme_installs_torchs_cpu_build_first_at_the_pinned_version():
    "Every torch the README installs is the pinned one; before the package, it installs torch's CPU build."
    pin = torch_pin()
    torches = [args for args in pip_installs(README) if any(re.match(r"torch\b", a) for a in args)]
    assert torches, "the README installs no torch"
    for args in torches:
        named = [a for a in args if re.match(r"torch\b", a)]
        assert named == [f"torch=={pin}"], f"pip install {' '.join(args)}: torch not pinned to {pin}"
    cpu = [args for args in torches if args[-2:] == ["--index-url", CPU_INDEX]]
    assert cpu, f"no `pip install torch=={pin} --index-url {CPU_INDEX}` in the README"
    # in the block that sets up the notebooks, torch's CPU build comes before the package
    for block in shell_commands(README):
        installs = [c[2:] for c in block if c[:2] == ["pip", "install"]]
        package = [i for i, args in enumerate(installs) if "-e" in args]
        if package:
            first_torch = next(i for i, args in enumerate(installs) if f"torch=={pin}" in args)
            assert first_torch < package[0], f"the package is installed before torch: {installs}"
            assert installs[first_torch][-2:] == ["--index-url", CPU_INDEX]


def test_every_extra_the_readme_names_exists_and_every_extra_is_named():
    "The README's extras are setup.py's (read from settings.ini); the table says what each adds."
    named = set()
    for args in pip_installs(README):
        for a in args:
            m = re.fullmatch(r"(?:\.|transformer_nb)\[([\w,]+)\]", a)
            if m: named |= set(m.group(1).split(","))
    assert named == extras_of_setup()
    for extra in extras_of_setup() - {"dev"}:
        row = re.search(rf'^\| `pip install -e "\.\[{extra}\]"` \| ([^|]+) \|', README, re.M)
        assert row, f"the README's table has no row for [{extra}]"
        adds = {w.strip() for w in row.group(1).split(",")}
        wants = {re.split(r"[<>=!~]", r)[0] for r in CFG[f"{extra}_requirements"].split()}
        assert adds == wants, f"[{extra}]: the README says {adds}, settings.ini {wants}"


@pytest.fixture
def fake_project(tmp_path):
    """A copy of what tools/venv.sh reads, with a .venv whose `pip` records its arguments (one line per call) and
    fails a `--no-index` install unless LOCAL_TORCH=1, and whose `python` answers the site-packages question."""
    for f in ("settings.ini", "setup.py", "pyproject.toml", "tools/constraints.txt", "tools/venv.sh"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tmp_path / f)
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (tmp_path / "site").mkdir()
    log = tmp_path / "pip.log"
    (bin_ / "pip").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        'case "$*" in *--no-index*) [ "$LOCAL_TORCH" = 1 ] || exit 1;; esac\n')
    (bin_ / "python").write_text(f'#!/bin/sh\necho "{tmp_path / "site"}"\n')
    for f in ("pip", "python"): (bin_ / f).chmod(0o755)
    fake_uname = tmp_path / "fakebin" / "uname"
    fake_uname.parent.mkdir()
    fake_uname.write_text('#!/bin/sh\necho "${FAKE_UNAME:-Linux}"\n')
    fake_uname.chmod(0o755)
    return tmp_path


def run_venv(project: Path, **env) -> list[str]:
    "Run the copy of tools/venv.sh; return the fake pip's calls"
    base = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX", "LOCAL_TORCH", "FAKE_UNAME")}
    base["PATH"] = f"{project / 'fakebin'}{os.pathsep}{base['PATH']}"
    out = subprocess.run(["bash", str(project / "tools" / "venv.sh")], capture_output=True, text=True,
                         env=base | env, timeout=60)
    assert out.returncode == 0, out.stderr
    return (project / "pip.log").read_text().splitlines()


@pytest.mark.parametrize("case", ["local wheel", "Linux", "macOS", "TORCH_INDEX"])
def test_make_venv_installs_torchs_cpu_build(fake_project, case):
    """make venv: torch pinned, from a wheel pip's configuration offers without an index, else PyTorch's CPU index
    (the README's) on Linux, PyPI on macOS, or the index TORCH_INDEX names; then the package with its [dev] extra."""
    pin = f"torch=={torch_pin()}"
    env = {"local wheel": {"LOCAL_TORCH": "1"}, "Linux": {}, "macOS": {"FAKE_UNAME": "Darwin"},
           "TORCH_INDEX": {"TORCH_INDEX": "https://example.invalid/whl/cu128", "LOCAL_TORCH": "1"}}[case]
    calls = run_venv(fake_project, **env)
    torch_calls = [c for c in calls if pin in c.split()]
    others = [w for c in calls for w in c.split() if w.startswith("torch") and w != pin]
    assert not others, calls                                              # no other torch, pinned or not
    want = {
        "local wheel": [f"install -q --no-index --no-deps {pin}", f"install -q {pin}"],
        "Linux": [f"install -q --no-index --no-deps {pin}", f"install -q {pin} --index-url {CPU_INDEX}"],
        "macOS": [f"install -q --no-index --no-deps {pin}", f"install -q {pin}"],
        "TORCH_INDEX": [f"install -q {pin} --index-url https://example.invalid/whl/cu128"],
    }[case]
    assert torch_calls == want
    assert calls[len(torch_calls):] == ["install -q -c tools/constraints.txt setuptools wheel",
                                        "install -q --no-build-isolation -c tools/constraints.txt -e .[dev]"]
    assert CPU_INDEX in README


def build_tools(dest: Path) -> Path:
    "Links to this environment's pip and setuptools in `dest`: what `pip install -e` needs, for PYTHONPATH"
    from importlib import metadata
    dest.mkdir()
    for name in ("pip", "setuptools"):
        dist = metadata.distribution(name)
        for top in {Path(f).parts[0] for f in dist.files or []} - {".."}:
            src = Path(dist.locate_file(top))
            if src.is_dir() and not (dest / top).exists(): (dest / top).symlink_to(src)
    return dest


def test_editable_install_in_a_fresh_environment(tmp_path):
    """`pip install --no-deps -e .` into a fresh environment that sees nothing of this one (no system site-packages,
    no pip of its own), offline: pip and setuptools are this environment's, lent for the install only through
    PYTHONPATH (`--no-index --no-build-isolation`). Then a clean interpreter (`-I`) imports the package from the
    clone, its metadata requires the pinned range of torch and declares every extra, and torch itself is not
    there: the README installs it first."""
    src = tmp_path / "clone"
    src.mkdir()
    for f in ("settings.ini", "setup.py", "pyproject.toml", "README.md", "LICENSE"): shutil.copy2(ROOT / f, src / f)
    shutil.copytree(ROOT / "transformer_nb", src / "transformer_nb",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True, timeout=60)
    py = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    lent = clean | {"PYTHONPATH": str(build_tools(tmp_path / "tools")), "PIP_CONFIG_FILE": os.devnull,
                    "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation",
                           "-e", src], capture_output=True, text=True, env=lent, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    code = ("import importlib.metadata as md, importlib.util, json, sys, transformer_nb as p\n"
            "print(json.dumps({'file': p.__file__, 'version': p.__version__,\n"
            "  'torch': importlib.util.find_spec('torch') is not None,\n"
            "  'pip': importlib.util.find_spec('pip') is not None,\n"
            "  'requires': md.requires('transformer_nb'),\n"
            "  'extras': md.metadata('transformer_nb').get_all('Provides-Extra')}))")
    out = subprocess.run([py, "-I", "-c", code], capture_output=True, text=True, env=clean, cwd=tmp_path,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert Path(got["file"]).is_relative_to(src), got["file"]
    assert got["version"] == CFG["version"]
    assert not got["torch"] and not got["pip"], f"the fresh environment sees this one's packages: {got}"
    assert CFG["requirements"] in got["requires"]                       # torch>=2.13, met by the README's pin
    assert set(got["extras"]) == extras_of_setup()
