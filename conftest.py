"""pytest --nbval on notebooks stored in nbdev_clean's form. A root conftest.py: it
applies to every path, and tests/conftest.py stays what `from conftest import` finds.

nbdev_clean sets every cell's execution_count to None; nbval then takes a cell with
outputs for an unrun reference ("Unrun reference cell has outputs") and one without
outputs for a cell it need not check. The notebooks of this project are always stored
executed (`make execute` runs them from a fresh kernel, then cleans them), so a code
cell's stored outputs are its reference, empty ones included: number the cells again,
in memory, before nbval runs them, and every output is compared.
"""


def pytest_collection_modifyitems(items):
    for item in items:
        cell = getattr(item, "cell", None)
        if type(item).__name__ == "IPyNbCell" and cell.get("execution_count") is None:
            cell["execution_count"] = item.cell_num + 1
