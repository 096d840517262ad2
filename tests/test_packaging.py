"""The package as pip builds and installs it: sdist, a wheel built from that sdist, and
the wheel installed into a fresh virtual environment that holds torch and nothing else.

Built with `python -m build --no-isolation` (the `build` package is already pinned in
tools/constraints.txt, as a dependency of nbdev): without isolation it uses the
setuptools of the project's environment, so the test needs no network and takes seconds.
The fresh environment gets torch by links to the project environment's torch and its
requirements (a `.pth` file), not by a new install of the 190 MB wheel.
"""
import configparser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from conftest import ROOT

CFG = configparser.ConfigParser(delimiters=["="])
CFG.read(ROOT / "settings.ini", encoding="utf-8")
CFG = CFG["DEFAULT"]
NAME, VERSION = CFG["lib_name"], CFG["version"]
# In the sdist, so that a wheel can be built from it (setup.py reads the first two)
PROBE = "zz_probe"  # a sub-package the test adds to its copy of the sources
SDIST_FILES = ["settings.ini", "README.md", "LICENSE", "pyproject.toml", "setup.py",
               f"{NAME}/py.typed", f"{NAME}/__init__.py"]


def run(*cmd, **kw):
    "Run `cmd`; on failure, the error shows its output."
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    shown = " ".join(map(str, cmd))
    assert out.returncode == 0, \
        f"{shown} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def source_modules() -> list[str]:
    "Every module of the package in the repository, sub-packages included."
    pkg = ROOT / NAME
    return sorted(".".join((NAME, *p.relative_to(pkg).with_suffix("").parts))
                  .removesuffix(".__init__") for p in pkg.rglob("*.py")
                  if "__pycache__" not in p.parts)


def requirement_closure(name: str) -> list[metadata.Distribution]:
    "The installed distribution `name` and everything it requires at run time."
    from packaging.requirements import Requirement
    seen, todo = {}, [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen: continue
        seen[key] = dist
        for r in map(Requirement, dist.requires or []):
            if r.marker is None or r.marker.evaluate({"extra": ""}): todo.append(r.name)
    return list(seen.values())


def link_torch_only(site: Path, dest: Path) -> list[str]:
    "Make `site` see torch and its requirements: links in `dest`, named by a .pth file."
    dest.mkdir()
    names = []
    for dist in requirement_closure("torch"):
        names.append(dist.metadata["Name"])
        files = [Path(f) for f in dist.files or [] if not str(f).startswith("..")]
        tops = {f.parts[0] for f in files}
        for top in tops:
            src = Path(dist.locate_file(top))
            if src.exists() and not (dest / top).exists(): (dest / top).symlink_to(src)
    (site / "_torch_only.pth").write_text(f"{dest}\n")
    return names


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    "Build the sdist, then the wheel from it, from a copy of the repository's files."
    tmp = tmp_path_factory.mktemp("packaging")
    src, dist = tmp / "src", tmp / "dist"
    # the files git would commit (tracked, or new and not ignored): no .venv, _docs, …
    files = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                cwd=ROOT).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    # a sub-package (as transformer_nb/book/ will be) must reach the wheel too
    probe = src / NAME / PROBE
    probe.mkdir(exist_ok=True)
    (probe / "__init__.py").write_text('"A sub-package added by the packaging test"\n')
    (probe / "mod.py").write_text("import torch\n")
    # `python -m build` builds the sdist, then the wheel from the unpacked sdist
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, src)
    sdists, wheels = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, f"built {sorted(dist.iterdir())}"
    return {"tmp": tmp, "sdist": sdists[0], "wheel": wheels[0]}


def test_sdist_has_what_a_wheel_build_needs(built):
    with tarfile.open(built["sdist"]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    missing = [f for f in SDIST_FILES if f not in names]
    assert not missing, f"sdist {built['sdist'].name} lacks {missing}"


def test_wheel_metadata(built):
    "py.typed, the explorer's assets and LICENSE in the wheel; classifiers, Python range from settings.ini."
    with zipfile.ZipFile(built["wheel"]) as z:
        names = z.namelist()
        meta = z.read(f"{NAME}-{VERSION}.dist-info/METADATA").decode()
        entry = z.read(f"{NAME}-{VERSION}.dist-info/entry_points.txt").decode()
    assert f"{NAME}/py.typed" in names
    for asset in ("explorer.js", "explorer.css"):                  # read by explorer.attention_explorer
        assert f"{NAME}/{asset}" in names, f"{asset} not in the wheel"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    statuses = {"3": "3 - Alpha", "4": "4 - Beta"}
    assert f"Classifier: Development Status :: {statuses[CFG['status']]}\n" in meta
    assert f"Requires-Python: >={CFG['min_python']}\n" in meta
    for req in CFG["requirements"].split():
        assert f"Requires-Dist: {req}\n" in meta, f"{req} not in METADATA:\n{meta}"
    assert "Provides-Extra: plot\n" in meta                       # pip install "transformer_nb[plot]"
    for req in CFG["plot_requirements"].split():
        assert f"Requires-Dist: {req}; extra == \"plot\"\n" in meta, meta
    assert "Provides-Extra: exercises\n" in meta                  # pip install "transformer_nb[exercises]"
    for req in CFG["exercises_requirements"].split():
        assert f"Requires-Dist: {req}; extra == \"exercises\"\n" in meta, meta
    assert "Provides-Extra: numbers\n" in meta                    # pip install "transformer_nb[numbers]"
    for req in CFG["numbers_requirements"].split():
        assert f"Requires-Dist: {req}; extra == \"numbers\"\n" in meta, meta
    pys = [l.rsplit(" ", 1)[1] for l in meta.splitlines()
           if l.startswith("Classifier: Programming Language :: Python :: 3.")]
    assert pys and pys[0] == CFG["min_python"], f"Python classifiers {pys}"
    assert "transformer-nb = transformer_nb.cli:main" in entry, entry


def test_wheel_in_a_torch_only_environment(built):
    "Install the wheel beside torch alone, import every module, run the console script."
    tmp = built["tmp"]
    env = tmp / "env"
    run(sys.executable, "-m", "venv", "--without-pip", env)
    py = env / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run(py, "-c", purelib).stdout.strip())
    linked = link_torch_only(site, tmp / "torch_only")
    assert "torch" in linked and "numpy" not in linked, linked
    # --no-index: the requirement torch>=2.1 must be met by the torch that is there
    run(sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-index",
        "--no-build-isolation", built["wheel"])
    code = ("import importlib, json, pkgutil, sys, transformer_nb as p\n"
            "mods = [p.__name__] + [m.name for m in pkgutil.walk_packages(p.__path__, "
            "p.__name__ + '.')]\n"
            "for m in mods: importlib.import_module(m)\n"
            "heavy = [m for m in ('matplotlib', 'IPython', 'nbdev', 'fastcore') "
            "if m in sys.modules]\n"
            "print(json.dumps({'file': p.__file__, 'mods': sorted(mods), "
            "'heavy': heavy}))\n"
            # then the explorer, in the same process (an interpreter that imports torch
            # costs seconds)
            "import torch; from transformer_nb.explorer import attention_explorer\n"
            "v = attention_explorer(torch.rand(1, 2, 3, 3).softmax(-1), list('abc'), "
            "fallback=False)\n"
            "print(len(v._repr_html_()))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = run(py, "-I", "-c", code, cwd=tmp, env=clean)
    got = json.loads(out.stdout.splitlines()[-2])
    assert Path(got["file"]).is_relative_to(site), f"imported {got['file']}, not {site}"
    want = sorted(source_modules() + [f"{NAME}.{PROBE}", f"{NAME}.{PROBE}.mod"])
    assert got["mods"] == want, f"installed modules {got['mods']}\nsources {want}"
    assert got["heavy"] == [], f"importing every module pulled in {got['heavy']}"
    assert (Path(got["file"]).parent / "py.typed").exists()
    assert int(out.stdout.split()[-1]) > 1000                      # the explorer's HTML
    out = run(env / "bin" / "transformer-nb", "--help", cwd=tmp, env=clean)
    assert "usage: transformer-nb" in out.stdout, out.stdout
