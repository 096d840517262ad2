"""The command line, through its real entry point (the installed `transformer-nb` script, in a subprocess): results on
stdout, progress and warnings on stderr; user errors give one line on stderr and status 2 (usage) or 1 (runtime), never
a traceback; --help and --version answer without loading torch. Where a test runs many commands, one goes through the
script and the rest through `main(argv)`, the function the script calls, in this process (each subprocess spends a
second or two importing torch)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_nb import __version__

EXE = Path(sys.executable).with_name("transformer-nb")


def cli(*args, cwd=None):
    cmd = [str(EXE)] if EXE.exists() else [sys.executable, "-c", "import sys; from transformer_nb.cli import main; sys.exit(main())"]
    return subprocess.run(cmd + [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPLBACKEND": "Agg"})


def in_process(capsys, *args) -> subprocess.CompletedProcess:
    "`main(args)` here, with what the script would print and its exit status"
    from transformer_nb.cli import main
    capsys.readouterr()
    try: code = main([str(a) for a in args])
    except SystemExit as e: code = e.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    "A copy model trained for a handful of steps by the command itself"
    out = tmp_path_factory.mktemp("run")
    r = cli("train", "--task", "copy", "--steps", "5", "--n-train", "200", "--out", out, cwd=out)
    return out, r


def test_train_writes_results_on_stdout_and_progress_on_stderr(trained):
    out, r = trained
    assert r.returncode == 0, r.stderr
    assert (out / "copy.pt").exists() and (out / "copy_cross_attention.png").exists()
    assert "exact match" in r.stdout and "saved" in r.stdout
    assert "5/5" in r.stderr and "5/5" not in r.stdout                   # the progress bar
    assert "on 1 thread" in r.stderr                                       # the default


def test_decode_greedy_and_beam(trained, capsys):
    out, _ = trained
    for beam, run in (("1", lambda *a: in_process(capsys, *a)), ("3", cli)):
        r = run("decode", "--checkpoint", out / "copy.pt", "--beam", beam, "123", "4567")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert [l.split("\t")[0] for l in lines] == ["123", "4567"] and r.stderr == ""


def test_characters_outside_the_vocabulary_get_a_warning(trained, capsys):
    out, _ = trained
    r = in_process(capsys, "decode", "--checkpoint", out / "copy.pt", "12x4")
    assert r.returncode == 0 and "warning" in r.stderr and "'x'" in r.stderr and "<unk>" in r.stderr
    assert r.stdout.startswith("12x4\t")


@pytest.mark.parametrize("args, words", [
    (["train", "--steps", "0"], ["--steps", "at least 1", "0"]),
    (["train", "--steps", "-5"], ["--steps"]),
    (["train", "--steps", "ten"], ["--steps", "whole number"]),
    (["train", "--threads", "0"], ["--threads"]),
    (["train", "--task", "sort"], ["invalid choice", "sort"]),
    (["decode", "--checkpoint", "x.pt", "--beam", "0", "123"], ["--beam", "at least 1"]),
    (["decode", "--checkpoint", "x.pt", "--max-len", "0", "123"], ["--max-len"]),
    (["decode", "--checkpoint", "x.pt"], ["texts"]),
    ([], ["command"]),
    # torch crashed (segmentation fault) on a huge thread count, and overflowed on a huge seed after training began
    (["train", "--threads", "100000"], ["--threads", "this machine's cores", "100000"]),
    (["decode", "--checkpoint", "x.pt", "--threads", "100000", "1"], ["--threads", "at most"]),
    (["train", "--seed", "99999999999999999999999"], ["--seed", "[0, 2**63)"]),
    (["train", "--seed", "-5"], ["--seed", "-5"]),
    (["generate", "--checkpoint", "x.pt", "--seed", "-1", "def"], ["--seed", "-1"]),
    (["induction", "--seed", "2**70"], ["--seed", "whole number"]),
    (["train-lm", "--seed", str(2**63)], ["--seed"]),
    # the top parser named itself ("transformer-nb: error"), not the command that has no such option
    (["train", "--bogus"], ["transformer-nb train: error: unrecognized arguments: --bogus", "train --help"]),
    (["decode", "--checkpoint", "x.pt", "12", "--zz"], ["transformer-nb decode: error", "--zz"]),
    # a misspelt flag and no command: it said only "the following arguments are required: command"
    (["--bogus"], ["transformer-nb: error: unrecognized arguments: --bogus", "no command", "train, decode"]),
    # a command's flag before the command: it said "invalid choice: 'copy'", the flag's value
    (["--task", "copy"], ["--task comes after a command", "COMMAND --task copy", "train, decode"]),
    (["trian"], ["invalid choice: 'trian'"]),                      # a misspelt command stays itself
    # a command's own flag without a value, or as --flag=value, before the command: it said "unrecognized
    # arguments: --quiet", from the command that has --quiet
    (["--quiet", "train"], ["transformer-nb train: error: --quiet comes after a command: transformer-nb train --quiet"]),
    (["--no-plots", "train", "--task", "reverse"], ["--no-plots comes after a command: transformer-nb train --no-plots"]),
    (["--greedy", "generate", "--checkpoint", "x.pt", "y"],
     ["transformer-nb generate: error: --greedy comes after a command: transformer-nb generate --greedy"]),
    (["--steps=3", "train"], ["--steps=3 comes after a command: transformer-nb train --steps=3"]),
    (["--bogus", "train"], ["transformer-nb train: error: unrecognized arguments: --bogus"]),   # not train's
    # what float32 cannot hold: exit 1 after loading the model (--temperature), a traceback from
    # torch.multinomial (--top-p, which float32 rounded to 0)
    (["generate", "--checkpoint", "x.pt", "--temperature", "1e-50", "y"],
     ["argument --temperature: must be at least 1.2e-38", "got 1e-50"]),
    (["generate", "--checkpoint", "x.pt", "--top-p", "1e-46", "y"], ["argument --top-p: must be at least 1.2e-38",
                                                                      "got 1e-46"]),
])
def test_usage_errors_exit_2_with_one_line(args, words, tmp_path):
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words: assert w in r.stderr, (w, r.stderr)


def test_runtime_errors_exit_1_with_one_line(trained, tmp_path, capsys):
    out, _ = trained
    notes = tmp_path / "notes.txt"; notes.write_text("not a model")
    cases = [
        (["decode", "--checkpoint", notes, "123"], "is not a transformer_nb checkpoint"),
        (["decode", "--checkpoint", tmp_path, "123"], "--checkpoint " + str(tmp_path) + " is a directory"),
        (["decode", "--checkpoint", tmp_path / "missing.pt", "123"], "no such checkpoint"),
        (["decode", "--checkpoint", out / "copy.pt", ""], "text 1 of 1 is blank ('')"),
        (["decode", "--checkpoint", out / "copy.pt", "12", "1" * 100],
         "text 2 of 2 '11111111111111111111...' is 100 tokens long; the model reads at most 64 (its max_len)"),
        (["train", "--task", "copy", "--steps", "1", "--out", notes / "sub"], "notes.txt"),
        (["train", "--task", "copy", "--steps", "1", "--out", notes], "is a file, not a folder"),
        (["train", "--task", "copy", "--steps", "1", "--n-train", "10", "--out", tmp_path], "--n-train 10 is less than one batch"),
    ]
    for i, (args, words) in enumerate(cases):  # the first through the script
        r = cli(*args, cwd=tmp_path) if i == 0 else in_process(capsys, *args)
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        errors = [l for l in r.stderr.splitlines() if "error" in l]
        assert len(errors) == 1 and "Traceback" not in r.stderr, (args, r.stderr)   # one line (after any status)
        assert words in errors[0], (args, r.stderr)


def test_version():
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"transformer-nb {__version__}"


def test_help_does_not_load_torch():
    "--help answers at once because the commands import torch only when they run"
    code = ("import sys\nfrom transformer_nb.cli import main\n"
            "try: main(['--help'])\nexcept SystemExit: pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "usage: transformer-nb" in r.stdout and r.stderr.strip() == "False"


def test_task_names_match_the_data_module():
    from transformer_nb.cli import _NUMBER_TASKS, _TASKS
    from transformer_nb.data import TASKS
    from transformer_nb.numbers import NUMBER_TASKS
    assert _TASKS == TASKS + NUMBER_TASKS and _NUMBER_TASKS == NUMBER_TASKS


def test_python_dash_m_is_the_same_command():
    "`python -m transformer_nb` answers like the console script: version, and a usage error with status 2."
    import subprocess
    import sys
    run = lambda *a: subprocess.run([sys.executable, "-m", "transformer_nb", *a], capture_output=True, text=True)
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("transformer-nb ")
    wrong = run("decode", "--beam", "0", "--checkpoint", "x.pt", "12")
    assert wrong.returncode == 2 and "--beam" in wrong.stderr and "Traceback" not in wrong.stderr


def test_torchrun_two_processes_resume_a_run(trained, tmp_path):
    "torchrun, 2 processes: the 5-step run goes on to 8; rank 0 alone prints and writes (the checkpoint only: --no-plots)"
    from transformer_nb.checkpoints import load_checkpoint
    out, _ = trained
    run = tmp_path / "run"
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc-per-node", "2", "-m", "transformer_nb", "train",
           "--resume", str(out / "copy.pt"), "--steps", "8", "--out", str(run), "--no-plots"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "MPLBACKEND": "Agg"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("exact match") == 1, r.stdout
    assert r.stderr.count("8/8") == 1 and "in each of 2 processes" in r.stderr, r.stderr
    training = load_checkpoint(run / "copy.pt")["training"]
    assert training["step"] == 8 and training["settings"]["task"] == "copy"
    assert sorted(p.name for p in run.iterdir()) == ["copy.pt"] and "png" not in r.stdout


RANK_1_ELSEWHERE = """import os
# the process of rank 1 starts in another folder: as if on another machine, with other files
if os.environ.get("RANK") == "1" and os.environ.get("RANK_1_CWD"): os.chdir(os.environ["RANK_1_CWD"])
"""


def test_nproc_error_found_by_one_process_is_one_line_and_every_process_exits(trained, tmp_path):
    "--nproc 2 (torch's elastic launcher): rank 1 finds a checkpoint of another model under the same name"
    from transformer_nb.checkpoints import save_model
    from transformer_nb.training import train_task
    out, _ = trained
    (tmp_path / "site").mkdir(); (tmp_path / "site" / "sitecustomize.py").write_text(RANK_1_ELSEWHERE)
    (tmp_path / "other").mkdir()
    t = train_task("copy", steps=1, n_train=200, n_valid=4, progress=False, d_model=16, num_heads=2, d_ff=32)
    save_model(tmp_path / "other" / "copy.pt", t.model, t.config, t.task.vocab, training=t.history.state)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "RANK_1_CWD": str(tmp_path / "other")}
    cmd = [sys.executable, "-m", "transformer_nb", "train", "--nproc", "2", "--resume", "copy.pt", "--steps", "9",
           "--out", str(tmp_path / "run"), "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=out, env=env)
    assert r.returncode == 1, (r.returncode, r.stderr)
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    assert errors == ["transformer-nb train: error: --resume copy.pt holds another model than --task copy's: d_model 16 "
                      "there, 32 here, num_heads 2 there, 4 here, d_ff 32 there, 64 here (on rank 1 of 2)"], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr


def test_torchrun_two_machines_one_without_the_checkpoint(trained, tmp_path):
    """Two torchrun commands, as on two machines (--nnodes 2), each run in its own folder; the second has no copy.pt:
    both print the same one line, and torchrun's own report of the failure names it"""
    import socket
    out, _ = trained
    with socket.socket() as s:                 # a port for the test's rendezvous
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
           f"127.0.0.1:{port}", "--rdzv-id", "test", "-m", "transformer_nb", "train", "--resume", "copy.pt",
           "--steps", "9", "--out", str(tmp_path / "run"), "--quiet"]
    machines = [subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for cwd in (out, tmp_path)]
    results = [m.communicate(timeout=300) for m in machines]
    want = "transformer-nb train: error: no such checkpoint: --resume copy.pt (on rank "
    for m, (_, stderr) in zip(machines, results):
        assert m.returncode == 1, stderr
        ours = [line for line in stderr.splitlines() if line.startswith("transformer-nb")]
        assert len(ours) == 1 and ours[0].startswith(want), stderr
        assert f"traceback : {ours[0]}" in stderr, stderr              # torchrun's report names the cause
    assert results[0][1].count(want) == results[1][1].count(want) == 2


def test_decode_dash_reads_standard_input(trained):
    out, _ = trained
    r = subprocess.run([str(EXE), "decode", "--checkpoint", str(out / "copy.pt"), "-"], input="123\n\n4567\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [line.split("\t")[0] for line in r.stdout.splitlines()] == ["123", "4567"]


NO_NUMPY = """import sys
class NoNumpy:
    "A torch-only install: NumPy cannot be imported"
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."): raise ModuleNotFoundError("No module named 'numpy'", name=name)
sys.meta_path.insert(0, NoNumpy())
"""


def test_torch_without_numpy_gives_no_warning(trained, tmp_path):
    out, _ = trained
    (tmp_path / "sitecustomize.py").write_text(NO_NUMPY)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    plain = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env)
    assert "Failed to initialize NumPy" in plain.stderr        # torch warns, so the test below can fail
    r = subprocess.run([sys.executable, "-m", "transformer_nb", "decode", "--checkpoint", str(out / "copy.pt"), "12"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.fixture(scope="module")
def numbers_run(tmp_path_factory):
    "A numbers-de model trained for a few steps by the command itself (chapter 11b)"
    out = tmp_path_factory.mktemp("numbers")
    return out, cli("train", "--task", "numbers-de", "--steps", "5", "--quiet", "--out", out, cwd=out)


def test_numbers_train_and_decode(numbers_run, capsys):
    out, r = numbers_run
    assert r.returncode == 0, r.stderr
    assert "numbers-de: exact match" in r.stdout and "held-out numbers" in r.stdout
    assert {p.name for p in out.iterdir()} == {"numbers-de.pt", "numbers-de_cross_attention.png",
                                               "numbers-de_alignment.png"}
    r = in_process(capsys, "decode", "--checkpoint", out / "numbers-de.pt", "97", "seven hundred and twelve")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert [l.split("\t")[0] for l in r.stdout.splitlines()] == ["97", "seven hundred and twelve"]


def test_numbers_bad_input_is_one_line_naming_it(numbers_run, tmp_path, capsys):
    out, _ = numbers_run
    ckpt = out / "numbers-de.pt"
    cases = [(["decode", "--checkpoint", ckpt, "1000"], 1, "text 1 of 1 '1000' is outside the numbers 1 to 999"),
             (["decode", "--checkpoint", ckpt, "12", "0"], 1, "text 2 of 2 '0' is outside"),
             (["decode", "--checkpoint", ckpt, "ninety-eleventy"], 1, "'eleventy'"),
             (["decode", "--checkpoint", ckpt, "seven ninety"], 1, "is not a number from 1 to 999"),
             (["decode", "--checkpoint", ckpt, "--beam", "3", "97"], 1, "--beam 3"),
             (["train", "--task", "numbers-de", "--n-train", "500", "--out", tmp_path], 1,
              "--n-train does not apply to --task numbers-de"),
             (["train", "--task", "numbers-es", "--out", tmp_path], 2, "invalid choice: 'numbers-es'")]
    for i, (args, status, words) in enumerate(cases):
        r = cli(*args, cwd=tmp_path) if i == 0 else in_process(capsys, *args)
        assert r.returncode == status, (args, r.returncode, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (args, r.stderr)
        assert words in r.stderr, (args, r.stderr)


def test_numbers_without_num2words_name_the_extra(tmp_path):
    "Without num2words the numbers task stops with one line saying what to install"
    code = ("import sys; sys.modules['num2words'] = None\n"
            "from transformer_nb.cli import main\n"
            f"sys.exit(main(['train', '--task', 'numbers-fr', '--steps', '1', '--out', {str(tmp_path)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert 'pip install "transformer_nb[numbers]"' in r.stderr, r.stderr


# ---------------------------------------------------------------- issue 43: no traceback for a user
@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    "An untrained language model with the vocabulary of Python's documentation, saved as `train-lm` saves one"
    import torch

    from transformer_nb.gpt import GPT, pydoc_text, save_lm
    out = tmp_path_factory.mktemp("lm")
    chars = pydoc_text().chars
    torch.manual_seed(0)
    save_lm(out / "pydoc_lm.pt", GPT(len(chars), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=64), chars)
    return out / "pydoc_lm.pt"


def _one_error_line(r):
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return errors[0]


def test_generate_and_decode_refuse_what_is_not_their_checkpoint_in_one_line(trained, lm, tmp_path, capsys):
    """A text file, an empty file, a pickled module, the other kind of checkpoint: one line each, status 1, naming
    --checkpoint; the other kind is named with the command that uses it (it quoted the two format strings)"""
    import torch
    out, _ = trained
    notes = tmp_path / "notes.txt"; notes.write_text("not a model")
    empty = tmp_path / "empty.pt"; empty.write_bytes(b"")
    module = tmp_path / "module.pt"; torch.save(torch.nn.Linear(2, 2), module)
    cases = [(["generate", "--checkpoint", notes, "x"], "model: it is not a file torch.save wrote"),
             (["generate", "--checkpoint", empty, "x"], "model: the file is empty"),
             (["generate", "--checkpoint", module, "x"], "Python objects that torch.load(weights_only=True)"),
             (["generate", "--checkpoint", tmp_path, "x"], "is a directory"),
             (["generate", "--checkpoint", out / "copy.pt", "x"],
              "is a translation model, written by `transformer-nb train`: use it with `transformer-nb decode`"),
             (["decode", "--checkpoint", lm, "123"],
              "is a language model, written by `transformer-nb train-lm`: use it with `transformer-nb generate`"),
             (["decode", "--checkpoint", empty, "123"], "checkpoint: the file is empty")]
    for i, (args, words) in enumerate(cases):  # the first through the script
        r = cli(*args, cwd=tmp_path) if i == 0 else in_process(capsys, *args)
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        line = _one_error_line(r)
        assert f"error: --checkpoint {args[2]} " in line and words in line, (args, line)
        assert "format" not in line, line


def test_resume_without_task_takes_the_runs_task_and_a_numbers_run_is_refused_in_one_line(numbers_run, capsys):
    out, _ = numbers_run
    r = in_process(capsys, "train", "--resume", out / "numbers-de.pt", "--steps", "9", "--out", out)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "--resume" in _one_error_line(r) and "numbers-de" in r.stderr, r.stderr


def test_generate_says_when_the_model_reads_only_the_end_of_the_prompt(lm, capsys):
    prompt = "The quick brown fox jumps over the lazy dog. " * 2          # 90 characters; 64 - 48 = 16 read
    r = in_process(capsys, "generate", "--checkpoint", lm, prompt, "--seed", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(prompt) and len(r.stdout) == len(prompt) + 48 + 1
    warning = r.stderr.strip()
    assert warning.startswith("transformer-nb generate: warning:") and len(warning.splitlines()) == 1, warning
    assert "last 16 of the prompt's 90 characters" in warning, warning
    short = in_process(capsys, "generate", "--checkpoint", lm, prompt[-16:], "--seed", "0")
    assert short.returncode == 0 and short.stderr == "", short.stderr


def test_dash_means_standard_input_for_generate_as_for_decode(lm, capsys, monkeypatch):
    import io
    given = in_process(capsys, "generate", "--checkpoint", lm, "def ", "--seed", "3", "--max-new-tokens", "8")
    monkeypatch.setattr("sys.stdin", io.StringIO("def "))
    dash = in_process(capsys, "generate", "--checkpoint", lm, "-", "--seed", "3", "--max-new-tokens", "8")
    assert given.returncode == dash.returncode == 0, dash.stderr
    assert dash.stdout == given.stdout and dash.stdout.startswith("def ")


@pytest.mark.parametrize("flags", [["--temperature", "0.5"], ["--top-k", "3"], ["--top-p", "0.9"], ["--seed", "1"]])
def test_greedy_with_sampling_flags_is_a_usage_error(lm, flags, tmp_path):
    r = cli("generate", "--checkpoint", lm, "--greedy", *flags, "def ", cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = _one_error_line(r)
    assert "--greedy" in line and flags[0] in line, line


def test_train_lm_help_states_the_steps_it_runs():
    "The default that --help states is the recipe's, LM_TRAINING (the help itself loads no torch)"
    from transformer_nb.cli import build_parser
    from transformer_nb.gpt import LM_TRAINING
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["train-lm"]
    steps = next(a for a in sub._actions if a.dest == "steps")
    assert steps.default == LM_TRAINING["steps"]
    assert f"default: {LM_TRAINING['steps']}" in " ".join(sub.format_help().split())


def test_what_a_user_gets_wrong_is_named_by_its_flag_before_anything_trains(trained, tmp_path, capsys):
    """A resumed run's settings and steps are checked before the `training ...` line, and named by their flags (a
    checkpoint without training state too); a folder --out cannot make is named; `-` twice is refused (standard input is read once)."""
    out, _ = trained
    ckpt = out / "copy.pt"                                  # copy, 5 steps, 200 pairs, seed 0
    from transformer_nb.checkpoints import load_checkpoint, load_model, save_model
    model, vocab, _ = load_model(ckpt)
    bare = tmp_path / "bare.pt"                             # the same model, saved for decoding only
    save_model(bare, model, load_checkpoint(ckpt)["config"], vocab)
    cases = [
        (["train", "--resume", ckpt, "--steps", "5", "--out", tmp_path], "--resume", "has done 5 steps already"),
        (["train", "--resume", ckpt, "--steps", "9", "--n-train", "300", "--out", tmp_path], "--n-train 200, not 300",
         "leave --n-train out"),
        (["train", "--resume", ckpt, "--steps", "9", "--seed", "3", "--out", tmp_path], "--seed 0, not 3", ""),
        (["train", "--resume", ckpt, "--steps", "9", "--task", "reverse", "--out", tmp_path], "--task copy", ""),
        (["train", "--task", "copy", "--steps", "1", "--out", "/proc/no/such"], "--out /proc/no/such", "cannot make"),
        (["train", "--resume", bare, "--steps", "9", "--out", tmp_path], f"--resume {bare}", "without its training state"),
    ]
    for args, *words in cases:
        r = in_process(capsys, *args)
        assert r.returncode == 1 and "training" not in r.stderr.split("error")[0], (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and all(w in r.stderr for w in words), (args, r.stderr)
    r = subprocess.run([str(EXE), "decode", "--checkpoint", str(ckpt), "-", "-"], input="12\n34\n",
                       capture_output=True, text=True, timeout=120) if EXE.exists() else None
    if r is not None:
        assert r.returncode == 1 and "- is given more than once" in r.stderr, r.stderr


def test_decode_fits_its_default_length_to_the_model(trained, capsys):
    """The default --max-len (the longest input + 8) is capped at the model's position table, so that any input the
    encoder reads decodes; one the encoder cannot read is refused in one line with the model's limit."""
    out, _ = trained
    ckpt = out / "copy.pt"
    from transformer_nb.checkpoints import load_model
    room = load_model(ckpt)[0].src_embed.positions.max_len
    r = in_process(capsys, "decode", "--checkpoint", ckpt, "1" * (room - 2))
    assert r.returncode == 0 and r.stdout.startswith("1" * (room - 2) + "\t"), r.stderr
    r = in_process(capsys, "decode", "--checkpoint", ckpt, "1" * 500)
    assert r.returncode == 1 and (f"text 1 of 1 '{'1' * 20}...' is 500 tokens long; the model reads at most {room}"
                                    in r.stderr), r.stderr


def test_what_a_new_user_tried_is_refused_in_one_line_before_anything_trains(trained, numbers_run, tmp_path, capsys):
    """Found by a reviewer trying the command as a new user (each of these was a traceback, a lost training run or a
    swamped machine): an --out where the checkpoint's name is a folder, or where nothing can be written (/proc), is
    refused before training for every command that trains; a beam wider than the vocabulary (each hypothesis keeps
    its own cache: --beam 1000000 took 17 GB); --max-len with a numbers checkpoint, which never used it; an empty
    --checkpoint or --resume; a text with a tab, which the two-column output cannot show; more processes than cores."""
    out, _ = trained
    (tmp_path / "copy.pt").mkdir(); (tmp_path / "pydoc_lm.pt").mkdir(); (tmp_path / "numbers-de.pt").mkdir()
    cases = [
        (["train", "--task", "copy", "--steps", "2", "--n-train", "64", "--out", tmp_path], "copy.pt is a folder"),
        (["train-lm", "--steps", "2", "--out", tmp_path], "pydoc_lm.pt is a folder"),
        (["train", "--task", "numbers-de", "--steps", "2", "--out", tmp_path], "numbers-de.pt is a folder"),
        (["train", "--task", "copy", "--steps", "2", "--n-train", "64", "--out", "/proc"], "--out /proc: cannot write"),
        (["train-lm", "--steps", "2", "--out", "/proc"], "--out /proc: cannot write"),
        (["decode", "--checkpoint", out / "copy.pt", "--beam", "1000000", "12"], "--beam 1000000: at most"),
        (["decode", "--checkpoint", numbers_run[0] / "numbers-de.pt", "--max-len", "9", "42"], "--max-len does not apply"),
        (["decode", "--checkpoint", "", "12"], "--checkpoint needs a checkpoint file, got ''"),
        (["train", "--resume", "", "--steps", "3"], "--resume needs a checkpoint"),
        (["decode", "--checkpoint", out / "copy.pt", "1\t2"], "holds a tab or a line break"),
    ]
    for args, words in cases:
        r = in_process(capsys, *args)
        assert r.returncode == 1 and words in _one_error_line(r), (args, r.stderr)
        assert "training" not in r.stderr, (args, r.stderr)
    r = in_process(capsys, "train", "--nproc", str((os.cpu_count() or 1) + 1), "--steps", "2")
    assert r.returncode == 2 and "this machine's cores" in r.stderr, r.stderr
    r = in_process(capsys, "decode", "--checkpoint", out / "copy.pt", "--beam", "3", "12")
    assert r.returncode == 0, r.stderr


def test_an_infinite_temperature_is_named_as_not_finite_and_unknown_characters_are_listed(trained, lm, capsys):
    "--temperature inf said 'must be a number > 0, got inf'; the warning printed the unknown characters as a substring"
    r = in_process(capsys, "generate", "--checkpoint", lm, "--temperature", "inf", "x")
    assert r.returncode == 2 and "must be a finite number > 0, got inf" in r.stderr, r.stderr
    out, _ = trained
    r = in_process(capsys, "decode", "--checkpoint", out / "copy.pt", "x1y")
    assert r.returncode == 0 and "'x1y' has characters outside the model's vocabulary" in r.stderr, r.stderr
    assert "'x', 'y'" in r.stderr, r.stderr


def test_decode_and_generate_errors_name_what_the_user_typed(trained, lm, capsys):
    """Found by a reviewer: an empty text was 'texts[0] is empty' (translate's parameter, not anything typed) while a
    blank one was decoded; --max-len 1000 said 'max_len 1000 exceeds max_len 64'; a missing checkpoint did not name
    --checkpoint, as train names --resume."""
    out, _ = trained
    ckpt = out / "copy.pt"
    cases = [
        (["decode", "--checkpoint", ckpt, "   "], "text 1 of 1 is blank ('   '): there is nothing to decode"),
        (["decode", "--checkpoint", ckpt, "12", ""], "text 2 of 2 is blank (''): there is nothing to decode"),
        (["decode", "--checkpoint", ckpt, "--max-len", "1000", "12"],
         "--max-len 1000: the model writes at most 64 tokens"),
        (["decode", "--checkpoint", ckpt, "--beam", "2", "--max-len", "65", "12"], "--max-len 65: the model writes"),
        (["decode", "--checkpoint", "nothere.pt", "12"], "no such checkpoint: --checkpoint nothere.pt"),
        (["generate", "--checkpoint", "nothere.pt", "x"], "no such checkpoint: --checkpoint nothere.pt"),
        (["generate", "--checkpoint", "", "x"], "--checkpoint needs a checkpoint file, got ''"),
    ]
    for args, words in cases:
        r = in_process(capsys, *args)
        assert r.returncode == 1 and words in _one_error_line(r), (args, r.stderr)
        assert "texts[" not in r.stderr and "max_len" not in r.stderr, (args, r.stderr)
    r = in_process(capsys, "decode", "--checkpoint", ckpt, "--max-len", "64", "12")   # the limit itself decodes
    assert r.returncode == 0 and r.stdout.startswith("12\t"), r.stderr


def test_help_states_the_steps_each_recipe_runs():
    """train's --steps said 'the task's TASK_SETTINGS', which has no numbers tasks (they run NUMBER_SETTINGS); induction's
    1500 was written in the help with nothing comparing it to INDUCTION_TRAINING"""
    from transformer_nb.cli import build_parser
    from transformer_nb.induction import INDUCTION_TRAINING
    from transformer_nb.numbers import NUMBER_SETTINGS, NUMBER_TASKS
    from transformer_nb.training import TASK_SETTINGS
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    train = " ".join(commands["train"].format_help().split())
    recipe = {task: s["steps"] for task, s in TASK_SETTINGS.items()}
    recipe |= {task: NUMBER_SETTINGS["steps"] for task in NUMBER_TASKS}
    assert "TASK_SETTINGS" not in train
    for task, steps in recipe.items(): assert re.search(rf"\b{task} {steps}\b", train), (task, train)
    induction = " ".join(commands["induction"].format_help().split())
    assert f"(default: the recipe's, {INDUCTION_TRAINING['steps']})" in induction, induction


# ---------------------------------------------------------------- a new user's audit of the command line (audit_cli)
def _command():
    "The installed script, else main through Python"
    return [str(EXE)] if EXE.exists() else [sys.executable, "-c",
                                            "import sys; from transformer_nb.cli import main; sys.exit(main())"]


RANK_0_SAVES_SLOWLY = """import os, sys, time
from transformer_nb import checkpoints
from transformer_nb.cli import main
log, write = os.environ["ORDER_LOG"], checkpoints.write_checkpoint
def slowly(path, ckpt):
    time.sleep(3)
    write(path, ckpt)
    with open(log, "a") as f: f.write("rank 0 saved\\n")
checkpoints.write_checkpoint = slowly
status = main()
with open(log, "a") as f: f.write(f"rank {os.environ['RANK']} left\\n")
sys.exit(status)
"""


def test_torchrun_every_process_waits_until_rank_0_has_saved(tmp_path):
    """The README's torchrun command sometimes aborted after training (2 runs in 34) and wrote nothing: rank 1
    returned at once and tore the process group down while rank 0 still evaluated and saved; torch then aborted it,
    and torchrun stopped rank 0. Every process now waits for rank 0 at a barrier: with rank 0's save slowed down by
    3 s, rank 1 leaves after it has saved, and the run ends with status 0"""
    script, log = tmp_path / "slow_save.py", tmp_path / "order.log"
    script.write_text(RANK_0_SAVES_SLOWLY)
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc-per-node", "2", str(script), "train", "--task", "copy", "--steps", "3",
           "--n-train", "200", "--out", str(tmp_path / "run"), "--quiet", "--no-plots"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "ORDER_LOG": str(log)})
    assert r.returncode == 0, r.stderr
    order = log.read_text().splitlines()
    assert sorted(order) == ["rank 0 left", "rank 0 saved", "rank 1 left"], order
    assert order.index("rank 0 saved") < order.index("rank 1 left"), order
    assert (tmp_path / "run" / "copy.pt").exists()


def test_a_reader_that_stops_reading_ends_decode_quietly(trained):
    "`decode ... | head` said 'error: [Errno 32] Broken pipe' with status 1: now nothing, and the status of SIGPIPE"
    out, _ = trained
    p = subprocess.Popen([*_command(), "decode", "--checkpoint", str(out / "copy.pt"), "12", "34"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                                    # nobody reads what decode writes, as after `| head -0`
    err = p.stderr.read().decode(); p.wait(timeout=120)
    assert p.returncode == 141 and err == "", (p.returncode, err)


def _unwritable(path) -> bool:
    "Make `path` a file this user cannot write: read-only, or immutable for root (chattr); False where neither holds"
    os.chmod(path, 0o444)
    if not os.access(path, os.W_OK): return True
    try: subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    except OSError: return False                        # no chattr
    return not os.access(path, os.W_OK)


def test_a_checkpoint_that_cannot_be_replaced_is_refused_before_training(tmp_path, capsys):
    """A {task}.pt that the save may not replace (immutable for root, read-only for a user, kept as it is) passed the check of --out,
    and the save failed after the whole training with torch's 'enforce fail ... Operation not permitted'"""
    (tmp_path / "copy.pt").write_bytes(b"an older run")
    if not _unwritable(tmp_path / "copy.pt"): pytest.skip("no way here to make a file this user cannot write")
    try:
        r = in_process(capsys, "train", "--task", "copy", "--steps", "2", "--n-train", "64", "--out", tmp_path,
                       "--no-plots")
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path / "copy.pt")], capture_output=True)
    assert r.returncode == 1 and f"--out {tmp_path}: cannot replace {tmp_path / 'copy.pt'}: " in _one_error_line(r)
    assert "training" not in r.stderr and (tmp_path / "copy.pt").read_bytes() == b"an older run", r.stderr


FULL_DISK = """import resource, signal, sys
from transformer_nb.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="RLIMIT_FSIZE is POSIX")
def test_a_save_that_fails_leaves_no_half_file_and_says_why(tmp_path):
    """A full disk left a truncated {task}.pt (decode then called it 'cut short') and the message was torch's
    '[enforce fail at inline_container.cc:672] . unexpected pos ...': now the OS's reason, and no file at all"""
    r = subprocess.run([sys.executable, "-c", FULL_DISK, "train", "--task", "copy", "--steps", "2", "--n-train",
                        "64", "--out", str(tmp_path), "--quiet", "--no-plots"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.splitlines()[-1] == f"transformer-nb train: error: cannot write {tmp_path / 'copy.pt'}: File too large"
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


CTRL_C_AS_NUMPY_IMPORTS = """import os, signal, sys
class CtrlC:
    "Ctrl-C just as NumPy starts to import (torch imports it)"
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and os.environ.pop("CTRL_C_AT_NUMPY", None): os.kill(os.getpid(), signal.SIGINT)
sys.meta_path.insert(0, CtrlC())
"""


def test_ctrl_c_while_torch_imports_numpy_is_an_interrupt(trained, tmp_path):
    """Torch swallows a KeyboardInterrupt raised while it imports NumPy: a Ctrl-C in the first quarter second was
    ignored (the command ran on and exited 0) or broke NumPy (a traceback from matplotlib, 'cannot load module more
    than once'). It is held back while torch imports, then raised: 'interrupted', status 130, nothing decoded"""
    out, _ = trained
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_AS_NUMPY_IMPORTS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CTRL_C_AT_NUMPY": "1"}
    r = subprocess.run([*_command(), "decode", "--checkpoint", str(out / "copy.pt"), "12"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (130, "", "transformer-nb decode: interrupted\n"), r


def test_plots_that_fail_are_one_line_after_the_checkpoint(tmp_path, capsys, monkeypatch):
    "An exception from matplotlib while plotting was a whole traceback; now one line that says the checkpoint is saved"
    import transformer_nb.transformer
    def broken(*args, **kwargs): raise AttributeError("module 'numpy' has no attribute 'subtract'")
    monkeypatch.setattr(transformer_nb.transformer, "show_attention_grid", broken)
    r = in_process(capsys, "train", "--task", "copy", "--steps", "2", "--n-train", "64", "--out", tmp_path, "--quiet")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.splitlines()[1:] == [
        f"transformer-nb train: error: the attention plots failed (AttributeError: module 'numpy' has no attribute "
        f"'subtract'); the checkpoint is saved: {tmp_path / 'copy.pt'}"], r.stderr                # after 'training...'

    assert (tmp_path / "copy.pt").exists()


def test_top_p_that_float32_rounds_to_0_keeps_the_most_probable_token():
    """filter_logits compared the mass with top_p in float32, where 1e-46 is 0: no token was kept, and
    torch.multinomial raised 'probability tensor contains either inf, nan or element < 0'. The most probable token
    is always in the nucleus, as the docstring's 'smallest set of mass >= p' says; the command line's float32 bound
    is float32's own"""
    import torch

    from transformer_nb.cli import _TINY
    from transformer_nb.gpt import filter_logits, sample_next
    logits = torch.tensor([[0.5, 2.0, -1.0, 1.0]])
    kept = filter_logits(logits, top_p=1e-46)
    assert torch.isfinite(kept).tolist() == [[False, True, False, False]], kept
    assert sample_next(logits, top_p=1e-46, generator=torch.Generator().manual_seed(0)).tolist() == [1]
    assert _TINY == torch.finfo(torch.float32).tiny


def test_resume_errors_name_the_flag_before_the_training_line(trained, tmp_path, capsys):
    """--resume of a directory said 'adir is a directory' (no flag); of a model of another shape,
    "resume='shape.pt' holds another model" after the 'training ...' line; of a task this version does not know,
    KeyError: 'nonsense' (a traceback); of a language model, its format string"""
    import torch

    from transformer_nb.checkpoints import save_model
    from transformer_nb.training import train_task
    out, _ = trained
    t = train_task("copy", steps=1, n_train=200, n_valid=4, progress=False, d_model=16, num_heads=2, d_ff=32)
    save_model(tmp_path / "shape.pt", t.model, t.config, t.task.vocab, training=t.history.state)
    ckpt = torch.load(out / "copy.pt", weights_only=True)
    ckpt["training"]["settings"]["task"] = "nonsense"
    torch.save(ckpt, tmp_path / "badtask.pt")
    (tmp_path / "adir").mkdir()
    from transformer_nb.gpt import GPT, save_lm
    save_lm(tmp_path / "lm.pt", GPT(3, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=8), "abc")
    cases = [("adir", "--resume {} is a directory, not a checkpoint file"),
             ("shape.pt", "--resume {} holds another model than --task copy's: d_model 16 there, 32 here, num_heads "
                          "2 there, 4 here, d_ff 32 there, 64 here"),
             ("badtask.pt", "--resume {} is a run of task 'nonsense', which this version does not know"),
             ("lm.pt", "--resume {} is a language model, written by `transformer-nb train-lm`: use it with "
                       "`transformer-nb generate`")]
    for name, words in cases:
        path = tmp_path / name
        r = in_process(capsys, "train", "--resume", path, "--steps", "9", "--out", tmp_path / "run", "--quiet")
        assert r.returncode == 1 and words.format(path) in _one_error_line(r), (name, r.stderr)


def test_what_train_prints_says_what_it_does(trained, numbers_run, tmp_path, capsys):
    """A resumed run's line gave the target, not the work ('for 7 steps', then 2 trained); the numbers tasks printed
    no 'training ...' line at all; a long text was quoted whole by the numbers tasks (cut at 20 characters by the
    others)"""
    out, _ = trained
    r = in_process(capsys, "train", "--resume", out / "copy.pt", "--steps", "7", "--out", tmp_path, "--quiet",
                   "--no-plots")
    assert r.returncode == 0 and "training copy for 2 steps (steps 6 to 7) on 1 thread(s)" in r.stderr, r.stderr
    assert numbers_run[1].stderr.startswith("training numbers-de for 5 steps on 1 thread(s)"), numbers_run[1].stderr
    r = in_process(capsys, "decode", "--checkpoint", numbers_run[0] / "numbers-de.pt", "one " * 30)
    line = _one_error_line(r)
    assert r.returncode == 1 and "text 1 of 1 'one one one one one ...'" in line and "one " * 6 not in line, line


def test_interrupted_starts_a_line_of_its_own_on_a_terminal(tmp_path, monkeypatch):
    "On a terminal, 'interrupted' followed the progress bar on its line ('... 2.1s^Ctransformer-nb train: interrupted')"
    import contextlib
    import io

    import transformer_nb.training
    from transformer_nb.cli import main

    class Terminal(io.StringIO):
        def isatty(self): return True

    def interrupted(*args, **kwargs):
        sys.stderr.write("\r[###   ] 127/600"); raise KeyboardInterrupt
    monkeypatch.setattr(transformer_nb.training, "train_task", interrupted)
    err = Terminal()
    with contextlib.redirect_stderr(err):
        status = main(["train", "--task", "copy", "--steps", "2", "--n-train", "64", "--out", str(tmp_path)])
    assert status == 130 and err.getvalue().endswith("\r[###   ] 127/600\ntransformer-nb train: interrupted\n"), err


NO_MATPLOTLIB = """import sys
sys.modules["matplotlib"] = None
from transformer_nb.cli import main
for task in ("copy", "numbers-de"):
    main(["train", "--task", task, "--steps", "2", "--quiet", "--out", sys.argv[1]])
"""


def test_without_matplotlib_the_warning_names_the_command(tmp_path):
    """The notices for a missing matplotlib were 'transformer-nb: ...' and, for the numbers tasks, 'transformer-nb: the
    plotting helpers need matplotlib: ...': not the form of every other warning"""
    r = subprocess.run([sys.executable, "-c", NO_MATPLOTLIB, str(tmp_path)], capture_output=True, text=True,
                       timeout=300)
    warnings = [line for line in r.stderr.splitlines() if "matplotlib" in line]
    assert warnings == ["transformer-nb train: warning: matplotlib is not installed: no attention plots"] * 2, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.pt", "numbers-de.pt"]


def test_nproc_interrupted_prints_one_line(tmp_path):
    "`train --nproc 2` stopped by Ctrl-C printed torch's log line 'Received 2 death signal, shutting down workers' too"
    import signal
    import time
    cmd = [sys.executable, "-m", "transformer_nb", "train", "--nproc", "2", "--task", "copy", "--steps", "100000",
           "--n-train", "200", "--out", str(tmp_path)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    first = p.stderr.readline()                         # training has begun
    time.sleep(1)
    os.killpg(p.pid, signal.SIGINT)                     # Ctrl-C: to every process of the terminal's group
    out, err = p.communicate(timeout=120)
    assert first.startswith("training copy for 100000 steps"), first
    # our line first, and not torch's log line; now and then a worker adds more as it dies (its C++ runtime's
    # "terminate called without an active exception", or the traceback of a second Ctrl-C that reached it while it
    # was ending, "[rank1]: ..."), which chapter 14 says and this test allows
    lines = err.splitlines()
    assert (p.returncode, out, lines[:1]) == (130, "", ["transformer-nb train: interrupted"]), (p.returncode, err)
    assert all(l.startswith("[rank") or l == "terminate called without an active exception" for l in lines[1:]), err
    assert "death signal" not in err
