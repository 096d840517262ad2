"""The package reads in the order of the book: a module exported by a notebook imports only modules exported by
notebooks that come before it (file names sort in reading order), there is no import loop, and the model modules
load none of the book's own material (transformer_nb.book: graders, exercise generator, diagrams, benchmark)."""
import ast
import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT

PKG = ROOT / "transformer_nb"


def exported_modules() -> dict[str, str]:
    "module (dotted, under transformer_nb) -> the notebook that exports it"
    found = {}
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            m = re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(cell["source"]), re.M)
            if m: found[m.group(1)] = nb.name
    return found


def package_imports(module: str) -> set[str]:
    "The modules of transformer_nb that `module` imports anywhere in its file (top level or inside functions)"
    path = PKG.joinpath(*module.split(".")).with_suffix(".py")
    here = module.split(".")[:-1]
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:                                     # relative: from ..x import y
                base = here[: len(here) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "transformer_nb":
                target = node.module.split(".")[1:]
            else: continue
            names = [a.name for a in node.names]
            if not node.module or ".".join(target) not in MODULES:   # from . import x / from .book import x
                deps |= {".".join(target + [n]) for n in names if ".".join(target + [n]) in MODULES}
            deps.add(".".join(target))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("transformer_nb."): deps.add(a.name.removeprefix("transformer_nb."))
    return {d for d in deps if d in MODULES and d != module}


MODULES = exported_modules()


def test_every_module_comes_from_a_notebook():
    on_disk = {".".join(p.relative_to(PKG).with_suffix("").parts) for p in PKG.rglob("*.py")
               if not p.name.startswith("_") or p.name == "__main__.py"}
    on_disk.add("__init__")  # the package's front door, nbs/99_api.ipynb
    assert on_disk == set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_reading_order(module):
    "Each import points to a notebook that sorts before this module's notebook."
    later = {d: MODULES[d] for d in package_imports(module) if MODULES[d] >= MODULES[module]}
    assert not later, f"{module} ({MODULES[module]}) imports modules of later notebooks: {later}"


def test_no_import_loop():
    graph = {m: package_imports(m) for m in MODULES}
    state = {}
    def visit(m, path):
        if state.get(m) == "done": return
        assert state.get(m) != "active", "import loop: " + " -> ".join(path + [m])
        state[m] = "active"
        for d in graph[m]: visit(d, path + [m])
        state[m] = "done"
    for m in graph: visit(m, [])


def test_the_model_loads_none_of_the_book():
    "Importing every model module pulls in nothing from transformer_nb.book."
    model = [m for m in MODULES if not m.startswith("book.")]
    code = ("import sys\n" + "".join(f"import transformer_nb.{m}\n" for m in model) +
            "print(sorted(m for m in sys.modules if m.startswith('transformer_nb.book')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_the_import_reader_sees_real_imports():
    "The reader of imports is not vacuous: it finds what multihead and the graders really import."
    assert {"core", "attention"} <= package_imports("multihead")
    assert {"embeddings", "layers", "transformer"} <= package_imports("book.graders_parts") | package_imports("book.graders_stack")
    assert package_imports("core") == set()


CHAPTERS = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if p.stem not in ("index", "99_api"))


@pytest.mark.parametrize("nb", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_opens_with_what_it_teaches_and_assumes(nb):
    "Right after the title: what the reader will learn and what they need first, with links."
    cells = json.loads(nb.read_text())["cells"]
    opening = "".join(cells[1]["source"]) if len(cells) > 1 else ""
    assert opening.startswith("**What you will learn:**") and "**What you need:**" in opening, nb.name
    need = opening.split("**What you need:**", 1)[1]
    assert re.search(r"\]\([a-z0-9_]+\.html[)#]", need) or "no earlier chapter" in need, \
        f"{nb.name}: say which chapters it needs, with links"
    assert len(opening.split()) < 90, f"{nb.name}: two or three lines, not a section"


@pytest.mark.parametrize("nb", sorted((ROOT / "nbs").glob("*.ipynb")), ids=lambda p: p.stem)
def test_code_lines_fit_88_columns(nb):
    "The site shows code as written: no line of a code cell is longer than 88 columns."
    long = [line for cell in json.loads(nb.read_text())["cells"] if cell["cell_type"] == "code"
            for line in "".join(cell["source"]).split("\n") if len(line) > 88]
    assert not long, f"{len(long)} lines over 88 columns, e.g. {long[0]!r}"


# Chapters that build, train or read a model end with a recap and questions (issue 44); only a "## Reference"
# section of API cards may follow them.
RECAP_CHAPTERS = ["01_embeddings", "02_attention", "03_multihead", "04_ffn", "05_norms", "06_layers",
                  "07_transformer", "08_masking", "09_data", "09a_checkpoints", "09b_reading", "10_training",
                  "10a_distributed", "11_decoding", "11a_pronouns", "11b_numbers", "11d_inside", "11e_induction",
                  "11f_modern"]


@pytest.mark.parametrize("stem", RECAP_CHAPTERS)
def test_chapter_ends_with_a_recap_and_questions(stem):
    """The last two sections: "## Recap" (three to five things the reader can now do) and "## Check your
    understanding" (three to five questions, each answer folded in <details><summary>Answer</summary>), followed
    at most by a "## Reference" section of API cards."""
    cells = json.loads((ROOT / "nbs" / f"{stem}.ipynb").read_text())["cells"]
    md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    heads = [(i, line) for i, s in enumerate(md) for line in s.splitlines() if line.startswith("## ")]
    if heads[-1][1] == "## Reference":  # the API cards, after the narrative
        md, heads = md[:heads[-1][0]], heads[:-1]
    assert [h for _, h in heads[-2:]] == ["## Recap", "## Check your understanding"], heads[-2:]
    recap = md[heads[-2][0]]
    assert 3 <= len(re.findall(r"^- ", recap, re.M)) <= 5, f"{stem}: the recap has 3 to 5 lines"
    after = "\n".join(md[heads[-1][0]:])
    answers = re.findall(r"<details><summary>Answer</summary>\n\n(.+?)\n\n</details>", after, re.S)
    assert 3 <= len(answers) <= 5, f"{stem}: {len(answers)} folded answers, not 3 to 5"
    assert all(a.strip() for a in answers)



def test_no_module_of_the_model_or_its_chapters_is_over_900_lines():
    """Files by concern (issue 39): a module of the model or of its chapters stays at 900 lines or fewer, so that
    one chapter's code reads as one file. The book's own machinery (transformer_nb/book: graders, exercises,
    benchmark) and nbdev's index are not part of the model."""
    long = {p.name: n for p in PKG.glob("*.py") if p.name != "_modidx.py"
            and (n := len(p.read_text(encoding="utf-8").splitlines())) > 900}
    assert not long, long
