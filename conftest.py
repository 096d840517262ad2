"""pytest --nbval on notebooks stored in nbdev_clean's form. A root conftest.py: it
applies to every path, and tests/conftest.py stays what `from conftest import` finds.

nbdev_clean sets every cell's execution_count to None; nbval then takes a cell with
outputs for an unrun reference ("Unrun reference cell has outputs") and one without
outputs for a cell it need not check. The notebooks of this project are always stored
executed (`make execute` runs them from a fresh kernel, then cleans them), so a code
cell's stored outputs are its reference, empty ones included: number the cells again,
in memory, before nbval runs them, and every output is compared.
"""


# The longest jobs first: `make test` runs two workers that each take a whole notebook or
# test module at a time (--dist loadscope, in this order: --no-loadscope-reorder), and a
# long notebook started last would leave the other worker idle at the end. Worker-seconds
# of one `make test` run on the 2-core machine; the rest keep their order. The browser
# test waits for the site's pages, which are built beside pytest in its first 50 s.
SLOW_FIRST = (  # seconds measured in one `make test` on 2026-11-26, longest first
    "tests/test_browser.py",  # 82 s, waiting for the pages included; every page in four views
    "nbs/11c_gpt.ipynb",  # 45 s: a language model trained on one thread
    "nbs/11e_induction.ipynb",  # 74 s: trains 800 steps of the induction model live
    "nbs/10_training.ipynb",  # 41 s
    "tests/test_cli.py",  # 37 s, torchrun included
    "tests/test_compile.py",  # 34 s with two inductor compiles
    "nbs/11b_numbers.ipynb",  # 22 s: trains two models
    "nbs/11d_inside.ipynb",  # reads its numbers model from a file (was trained: 108 s under nbval at load 9)
    "tests/test_exercises.py",  # 16 s: Run All of every exercise notebook
    "nbs/13_benchmark.ipynb",  # 13 s: a quick benchmark run
    "tests/test_explorer.py",  # 12 s
    "nbs/11a_pronouns.ipynb",  # 12 s
    "nbs/11_decoding.ipynb",  # 10 s
    "tests/test_numbers.py",  # 8 s
    "nbs/91c_graders_training.ipynb",  # 7 s
    "tests/test_grading_reading.py",  # 7 s: trains its two small models
    "tests/test_seeds.py",  # 6 s
    "nbs/14_cli.ipynb",  # 6 s
    "nbs/12_fast.ipynb",  # 6 s
    "tests/test_decoding.py",  # 6 s
    "tests/test_nbdev_commands.py",  # 6 s
    "nbs/10a_distributed.ipynb",  # 5 s
)


# The attention explorer's script (transformer_nb/explorer.js and .css, put whole into each
# view's HTML) is the package's code, not a cell's result: nbval compares a view's HTML
# without it, so a change to the explorer does not mean executing every chapter that shows
# one again; the site's builder puts the current script into the pages.
EXPLORER_SCRIPT = (r"<script>\(function\(\)\{if\(!window\.__tnbExplorer1\)\{[\s\S]*?"
                   r"window\.__tnbExplorer1\.boot\(document\.currentScript\);\}\)\(\);</script>")


def pytest_collection_modifyitems(items):
    for item in items:
        cell = getattr(item, "cell", None)
        if type(item).__name__ == "IPyNbCell" and cell.get("execution_count") is None:
            cell["execution_count"] = item.cell_num + 1
        patterns = getattr(item.parent, "sanitize_patterns", None)
        if type(item).__name__ == "IPyNbCell" and patterns is not None:
            patterns[EXPLORER_SCRIPT] = "<script>(the explorer's script)</script>"
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


# How long each notebook takes to execute under nbval (the sum of its cells, kernel start
# excluded), printed at the end of the run beside the budgets of issue 13: the training
# chapter 60 s on one thread, every other notebook 30 s. A figure, not a test: timings
# depend on the machine and its load, so nothing fails on them.
BUDGET_S = {"10_training.ipynb": 60.0, "11b_numbers.ipynb": 80.0, "11c_gpt.ipynb": 80.0,
            "11d_inside.ipynb": 60.0, "11e_induction.ipynb": 90.0, "11f_modern.ipynb": 90.0}
_NOTEBOOK_S: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if report.when == "call" and report.nodeid.startswith("nbs/"):
        nb = report.nodeid.split("::")[0].removeprefix("nbs/")
        _NOTEBOOK_S[nb] = _NOTEBOOK_S.get(nb, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _NOTEBOOK_S: return
    tr = terminalreporter
    tr.section("notebook execution times (budget: 10_training and 11d_inside 60 s, 11b_numbers "
               "and 11c_gpt 80 s, 11e_induction and 11f_modern 90 s, others 30 s)")
    for nb, s in sorted(_NOTEBOOK_S.items(), key=lambda kv: -kv[1]):
        budget = BUDGET_S.get(nb, 30.0)
        tr.write_line(f"{s:7.1f} s  {nb}{'  OVER BUDGET' if s > budget else ''}")
    tr.write_line(f"{sum(_NOTEBOOK_S.values()):7.1f} s  all notebooks")
