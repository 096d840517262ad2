"""nbdev's own commands are safe in this project: without Quarto, the commands that
would install it (with sudo, then `pip install -e .[dev]` into whatever Python is first
on the PATH) stop with one line (tools/nbdev_guard.py, installed by tools/venv.sh)."""
import os, shutil, subprocess, sys
from pathlib import Path
import pytest
from conftest import ROOT

BIN = Path(sys.executable).parent
COMMANDS = ["nbdev_docs", "nbdev_preview", "nbdev_readme", "nbdev_prepare",
            "nbdev_proc_nbs", "nbdev_install", "nbdev_install_quarto"]
RECORDED = ["sudo", "pip", "pip3", "curl", "dpkg", "apt-get", "installer"]


@pytest.fixture
def sandbox(tmp_path):
    "A project with only settings.ini; a PATH whose sudo, pip, … only record calls."
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    log = tmp_path / "calls.log"
    for c in RECORDED:
        (fake / c).write_text(f'#!/bin/sh\necho "{c} $*" >> "{log}"\n')
        (fake / c).chmod(0o755)
    proj = tmp_path / "proj"
    (proj / "nbs").mkdir(parents=True)
    (proj / "settings.ini").write_text((ROOT / "settings.ini").read_text())
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL"))}
    env["PATH"] = f"{fake}:/usr/bin:/bin"
    env["HOME"] = str(tmp_path)
    return proj, env, log


@pytest.mark.parametrize("cmd", COMMANDS)
def test_quarto_commands_stop_without_quarto(sandbox, cmd):
    proj, env, log = sandbox
    exe = BIN / cmd
    if not exe.exists(): pytest.skip(f"{exe} missing: nbdev is not in this environment")
    if subprocess.run(["sh", "-c", "command -v quarto"], env=env).returncode == 0:
        pytest.skip("quarto is in /usr/bin or /bin: the guard lets it through")
    out = subprocess.run([exe], cwd=proj, env=env, capture_output=True, text=True,
                         timeout=120)
    calls = log.read_text() if log.exists() else ""
    assert calls == "", f"{cmd} ran: {calls}"
    assert out.returncode == 1, \
        f"{cmd} exited {out.returncode}: {out.stdout}{out.stderr}"
    assert out.stdout == "", out.stdout
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{cmd}: needs Quarto"), out.stderr
    assert "make site" in lines[0] or "make test" in lines[0], lines[0]
    assert sorted(p.name for p in proj.iterdir()) == ["nbs", "settings.ini"]


def test_guard_lets_quarto_through(sandbox, tmp_path):
    "With a `quarto` on the PATH the guard stays out of the way."
    proj, env, log = sandbox
    quarto = tmp_path / "fake-bin" / "quarto"
    quarto.write_text("#!/bin/sh\nexit 0\n")
    quarto.chmod(0o755)
    code = "import nbdev.quarto as q; q._ensure_quarto(); print(q._tnb_guarded)"
    out = subprocess.run([sys.executable, "-c", code], cwd=proj, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stdout + out.stderr


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
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
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
