"""Keep nbdev's Quarto commands from installing anything where Quarto is missing.

tools/venv.sh copies this file into the project's virtual environment, with a `.pth`
file that imports it when the interpreter starts. It wraps, in `nbdev.quarto`, the
commands that without Quarto run `sudo dpkg -i quarto….deb` and then
`pip install -e ".[dev]"` with whatever `pip` is first on the PATH (nbdev_docs,
nbdev_preview, nbdev_proc_nbs, nbdev_install, nbdev_install_quarto) or fail on the
missing `quarto` (nbdev_readme, nbdev_contributing, nbdev_prepare). Without `quarto` on
the PATH, each stops with one line naming the project's own command, exit status 1.
With `quarto` on the PATH they run unchanged.

The check runs when a command is called, not at import: tools/build_site.py uses
nbdev's pre-render steps without Quarto and is not affected. Start-up cost: one
`sys.meta_path` entry; nothing is imported until `nbdev.quarto` is.
"""
import sys

SITE = "build the site with `make site`, serve it with `make serve`"
GUARDED = {  # function of nbdev.quarto -> (command a user types, what to do instead)
    "nbdev_docs": ("nbdev_docs", SITE),
    "nbdev_preview": ("nbdev_preview", SITE),
    "nbdev_readme": ("nbdev_readme", "`make site` writes README.md from index.ipynb"),
    "nbdev_contributing": ("nbdev_contributing", "edit CONTRIBUTING.md by hand"),
    "nbdev_proc_nbs": ("nbdev_proc_nbs", SITE),
    "prepare": ("nbdev_prepare", "run `make test` (it exports and runs every test)"),
    "install": ("nbdev_install", SITE),
    "install_quarto": ("nbdev_install_quarto", SITE),
    "_ensure_quarto": ("nbdev", SITE),
}


def message(cmd: str, instead: str) -> str:
    "The one line a guarded command prints when Quarto is missing."
    return (f"{cmd}: needs Quarto, which is not on the PATH; stopped before nbdev runs "
            f"sudo or pip to install it. Instead, {instead}.")


def _guard(fn, cmd: str, instead: str):
    import functools

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        import shutil
        if shutil.which("quarto") is None:
            raise SystemExit(message(cmd, instead))
        return fn(*args, **kwargs)

    # nbdev also calls its commands as `f.__wrapped__()`: guard that path too
    inner = fn.__dict__.get("__wrapped__")
    if inner is not None:
        guarded.__wrapped__ = _guard(inner, cmd, instead)
    return guarded


def patch(mod) -> None:
    "Wrap the guarded functions of the module `nbdev.quarto` (once)."
    if getattr(mod, "_tnb_guarded", False):
        return
    for name, (cmd, instead) in GUARDED.items():
        if hasattr(mod, name):
            setattr(mod, name, _guard(getattr(mod, name), cmd, instead))
    mod._tnb_guarded = True


def patch_export(mod) -> None:
    """Make `nbdev.export`'s default processor also write docstrings for `help()`.

    `nbdev_export` runs the processor `black_format` on every cell unless told otherwise;
    wrapped, it then runs `_tnb_docstrings.export_proc` (tools/nbdev_docstrings.py), which
    turns each exported public API's docments into a numpydoc docstring in the module."""
    if getattr(mod, "_tnb_docstrings", False):
        return
    import functools
    from _tnb_docstrings import export_proc
    black_format = mod.black_format

    @functools.wraps(black_format)
    def black_format_and_docstrings(cell, *args, **kwargs):
        res = black_format(cell, *args, **kwargs)
        export_proc(cell)
        return res

    mod.black_format = black_format_and_docstrings
    mod._tnb_docstrings = True


PATCHES = {"nbdev.quarto": patch, "nbdev.export": patch_export}


class _Finder:
    "A meta-path finder: the normal finders load nbdev.quarto (nbdev.export), then it is patched."

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in PATCHES:
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            PATCHES[fullname](module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    "Called by the `.pth` file at start-up."
    for name, fn in PATCHES.items():
        if name in sys.modules:
            fn(sys.modules[name])
    if _Finder not in sys.meta_path:
        sys.meta_path.insert(0, _Finder)
