"""Remove the execution timestamps that Jupyter records in cell metadata, so that a re-executed notebook is
byte-identical to the committed one. (nbdev_clean would also blank execution counts, which nbval needs.)"""
import sys
import nbformat

for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if "execution" in cell.metadata:
            del cell.metadata["execution"]; changed = True
    if changed:
        nbformat.write(nb, path)
        print(f"strip_timing: {path}")
