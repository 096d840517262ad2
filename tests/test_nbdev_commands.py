"""nbdev is stock here and its commands are safe.

- The modules are their cells: in a copy of the repository, stock `nbdev_export`, `nbdev_clean`
  and the `_quarto.yml` refresh of `nbdev_prepare` change no file.
- No `.pth` file patches nbdev in the project's environment.
- Without Quarto, the commands that would install it (with sudo, then `pip install -e .[dev]`
  into whatever Python is first on the PATH) stop with one line: tools/venv.sh replaces
  their launchers in .venv/bin. `nbdev_prepare` and `nbdev_readme` install nothing: without
  Quarto their README step fails on the missing `quarto` (exit status 127)."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

BIN = Path(sys.executable).parent
GUARDED = ["nbdev_docs", "nbdev_preview", "nbdev_proc_nbs", "nbdev_install",
           "nbdev_install_quarto"]
RECORDED = ["sudo", "pip", "pip3", "curl", "dpkg", "apt-get", "installer"]
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_CONFIG_NOSYSTEM": "1"}


def nbdev_bin(cmd: str) -> Path:
    exe = BIN / cmd
    if not exe.exists(): pytest.skip(f"{exe} missing: nbdev is not in this environment")
    return exe


@pytest.fixture
def sandbox(tmp_path):
    "A project with settings.ini and an index notebook; a PATH whose sudo, pip, … only record calls."
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    log = tmp_path / "calls.log"
    for c in RECORDED:
        (fake / c).write_text(f'#!/bin/sh\necho "{c} $*" >> "{log}"\n')
        (fake / c).chmod(0o755)
    proj = tmp_path / "proj"
    (proj / "nbs").mkdir(parents=True)
    (proj / "settings.ini").write_text((ROOT / "settings.ini").read_text())
    (proj / "nbs" / "index.ipynb").write_text(
        '{"cells": [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": ["# x"]}],'
        ' "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL"))}
    env["PATH"] = f"{fake}:/usr/bin:/bin"
    env["HOME"] = str(tmp_path)
    if subprocess.run(["sh", "-c", "command -v quarto"], env=env).returncode == 0:
        pytest.skip("quarto is in /usr/bin or /bin: the commands would run it")
    return proj, env, log


@pytest.mark.parametrize("cmd", GUARDED)
def test_quarto_commands_stop_without_quarto(sandbox, cmd):
    proj, env, log = sandbox
    out = subprocess.run([nbdev_bin(cmd)], cwd=proj, env=env, capture_output=True,
                         text=True, timeout=120)
    calls = log.read_text() if log.exists() else ""
    assert calls == "", f"{cmd} ran: {calls}"
    assert out.returncode == 1, \
        f"{cmd} exited {out.returncode}: {out.stdout}{out.stderr}"
    assert out.stdout == "", out.stdout
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{cmd}: needs Quarto"), out.stderr
    assert "make site" in lines[0], lines[0]
    assert sorted(p.name for p in proj.iterdir()) == ["nbs", "settings.ini"]


def test_launchers_let_quarto_through(sandbox, tmp_path):
    "With a `quarto` on the PATH the launcher calls nbdev's own command (here: its sudo)."
    proj, env, log = sandbox
    quarto = tmp_path / "fake-bin" / "quarto"
    quarto.write_text("#!/bin/sh\nexit 0\n")
    quarto.chmod(0o755)
    subprocess.run([nbdev_bin("nbdev_install_quarto")], cwd=proj, env=env,
                   capture_output=True, text=True, timeout=120)
    assert log.exists() and log.read_text().startswith("sudo "), \
        log.read_text() if log.exists() else "nbdev's install_quarto was not called"


@pytest.mark.parametrize("cmd", ["nbdev_prepare", "nbdev_readme"])
def test_prepare_and_readme_install_nothing(sandbox, cmd):
    """nbdev_prepare exports, tests and cleans, then renders README.md with Quarto where it
    is older than nbs/index.ipynb (nbdev_readme always): without Quarto that step fails,
    calling nothing else."""
    proj, env, log = sandbox
    out = subprocess.run([nbdev_bin(cmd)], cwd=proj, env=env, capture_output=True,
                         text=True, timeout=300)
    assert not log.exists(), f"{cmd} ran: {log.read_text()}"
    assert out.returncode == 127 and "quarto: not found" in out.stderr, \
        f"{cmd} exited {out.returncode}: {out.stdout}{out.stderr}"
    if cmd == "nbdev_readme": return  # it renders whatever the dates
    # README.md newer than the notebook: nbdev_prepare skips the step and succeeds
    (proj / "README.md").write_text("# x\n")
    out = subprocess.run([nbdev_bin(cmd)], cwd=proj, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and not log.exists(), out.stdout + out.stderr


def test_nbdev_is_not_patched():
    "No .pth file in the environment touches nbdev; nbdev_export's processors are nbdev's."
    site = Path(sysconfig.get_paths()["purelib"])
    for pth in site.glob("*.pth"):
        assert "nbdev" not in pth.read_text() and "_tnb" not in pth.read_text(), pth
    import nbdev.export
    assert nbdev.export.black_format.__module__ == "nbdev.export"


def test_stock_nbdev_leaves_a_copy_unchanged(tmp_path):
    """A copy of the repository's files, committed: stock nbdev_export, nbdev_clean and
    nbdev_prepare's refresh of nbs/_quarto.yml change nothing git sees."""
    repo = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if not (ROOT / f).is_file(): continue     # deleted in the working tree
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, repo / f)
    env = {**os.environ, **GIT_ENV}
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, env=env, check=True,
                                    capture_output=True, text=True).stdout
    git("init", "-q"); git("add", "-A"); git("commit", "-qm", "copy")
    for cmd in ([nbdev_bin("nbdev_export")], [nbdev_bin("nbdev_clean")],
                [sys.executable, "-c",
                 "from nbdev.quarto import refresh_quarto_yml; refresh_quarto_yml()"]):
        out = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        changed = git("status", "--porcelain")
        assert changed == "", f"{Path(cmd[-1]).name} changed:\n{changed}"


def test_make_hooks_sends_notebook_conflicts_to_the_venv_nbdev_merge(tmp_path):
    "tools/hooks.sh + .gitattributes: git merges a notebook with .venv/bin/nbdev_merge."
    repo, log = tmp_path / "repo", tmp_path / "merge.log"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "hooks.sh", repo / "tools" / "hooks.sh")
    (repo / "tools" / "hooks.sh").chmod(0o755)
    (repo / ".gitattributes").write_bytes((ROOT / ".gitattributes").read_bytes())
    driver = repo / ".venv" / "bin" / "nbdev_merge"  # logs its arguments, keeps theirs
    driver.parent.mkdir(parents=True)
    driver.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\ncp "$3" "$2"\n')
    driver.chmod(0o755)
    (repo / ".gitignore").write_text(".venv/\n")
    env = {**os.environ, **GIT_ENV}
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, env=env, check=True,
                                    capture_output=True, text=True)
    nb = repo / "a.ipynb"
    git("init", "-q", "-b", "main")
    nb.write_text('{"cells": ["base"]}\n')
    git("add", "-A"); git("commit", "-qm", "base")
    git("checkout", "-qb", "other")
    nb.write_text('{"cells": ["theirs"]}\n'); git("commit", "-qam", "theirs")
    git("checkout", "-q", "main")
    nb.write_text('{"cells": ["ours"]}\n'); git("commit", "-qam", "ours")
    out = subprocess.run([repo / "tools" / "hooks.sh"], cwd=repo, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    git("merge", "-q", "--no-edit", "other")
    assert log.exists(), "git did not call .venv/bin/nbdev_merge"
    assert log.read_text().split()[-1] == "a.ipynb", log.read_text()
    assert nb.read_text() == '{"cells": ["theirs"]}\n'
