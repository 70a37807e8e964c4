"""The command line's refusals: bad arguments in one line with exit status 2 (no traceback),
``--version``, and `info` on files that are not what they claim to be."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.cli import main


def _refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


PORT = "argument --port: must be in 0..65535 (0: any free port), got"
DIM = "argument --dim: must be >= 2 (the demo's generated hierarchy needs it), got 1"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "x", "--port", "-1"], f"{PORT} -1"),
        (["inspect", "x", "--port", "70000"], f"{PORT} 70000"),
        (["inspect", "x", "--port", "http"], "argument --port: must be an integer in 0..65535, got 'http'"),
        (["demo", "--dim", "1"], DIM),
        (["demo", "--seed", "-1"], "argument --seed: must be >= 0, got -1"),
        (["demo", "--n", "0"], "argument --n: must be >= 1, got 0"),
        (["demo", "--k", "ten"], "argument --k: must be an integer >= 1, got 'ten'"),
        (["demo", "--threads", "100000"], "argument --threads: must be in 1..1024, got 100000"),
    ],
)
def test_bad_arguments_are_one_line_with_status_2(capsys, argv, message):
    """Before: --port -1 and 70000 and demo --dim 1 ended in tracebacks (OverflowError, ValueError)."""
    err = _refused(capsys, argv)
    assert message in err and err.startswith(f"poincare-index {argv[0]}: error: ")


def test_the_port_bounds_are_accepted():
    from poincare_index.cli import build_parser

    assert build_parser().parse_args(["inspect", "x", "--port", "0"]).port == 0
    assert build_parser().parse_args(["inspect", "x", "--port", "65535"]).port == 65535
    assert build_parser().parse_args(["demo", "--dim", "2"]).dim == 2


def test_version_prints_the_package_version(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"poincare_index {pi.__version__}\n"
    proc = subprocess.run(
        [sys.executable, "-m", "poincare_index", "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not a checkout, whose unbuilt source would be what -m finds
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"poincare_index {pi.__version__}"


def _save_index(path):
    index = pi.PoincareFlatIndex(4)
    index.add(np.full((3, 4), 0.1, dtype=np.float32))
    index.save(path)


def test_info_on_a_manifest_of_random_bytes_names_the_file_without_a_byte_dump(tmp_path, capsys):
    """Before: "... is not valid JSON: UnicodeDecodeError('utf-8', b'\\xee\\x98...', ...)" -- a
    hundred escaped bytes."""
    _save_index(tmp_path / "ix")
    manifest = tmp_path / "ix" / "manifest.json"
    manifest.write_bytes(np.random.default_rng(7).integers(128, 256, 300, dtype=np.uint8).tobytes())
    assert main(["info", str(tmp_path / "ix")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"poincare-index info: {manifest} is not a valid manifest of a saved index: ")
    assert "it is not UTF-8 text (byte " in err and "\\x" not in err and len(err) < len(str(manifest)) + 150


def test_info_on_a_manifest_that_is_not_json_quotes_a_short_excerpt(tmp_path, capsys):
    _save_index(tmp_path / "ix")
    manifest = tmp_path / "ix" / "manifest.json"
    manifest.write_text('{"format": "poincare_index", oops' + " and more" * 100)
    assert main(["info", str(tmp_path / "ix")]) == 2
    err = capsys.readouterr().err
    assert f"{manifest} is not a valid manifest of a saved index: it is not JSON (" in err
    assert "line 1, column 30" in err and "oops" in err and len(err) < len(str(manifest)) + 200


def test_info_on_a_store_configuration_of_random_bytes(tmp_path, capsys):
    from poincare_memory import Memory

    with Memory(path=tmp_path / "store") as mem:
        mem.add("a fact")
    config = tmp_path / "store" / "default" / "config.json"
    config.write_bytes(np.random.default_rng(8).integers(128, 256, 300, dtype=np.uint8).tobytes())
    assert main(["info", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert f"{config} is not a valid store configuration: it is not UTF-8 text" in err and "\\x" not in err


def test_inspect_refuses_a_garbled_manifest_before_showing_a_url(tmp_path, capsys):
    _save_index(tmp_path / "ix")
    manifest = tmp_path / "ix" / "manifest.json"
    manifest.write_bytes(np.random.default_rng(9).integers(128, 256, 300, dtype=np.uint8).tobytes())
    assert main(["inspect", str(tmp_path / "ix"), "--port", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "\\x" not in captured.err
    assert captured.err.startswith(f"poincare-index inspect: {manifest} is not a valid manifest")


def test_loaders_name_a_garbled_json_file_without_dumping_its_bytes(tmp_path):
    """read_index and Memory(path=) say what the CLI says (before: the bytes in a repr)."""
    import numpy as np

    import poincare_index as pi
    from poincare_memory import Memory

    index = pi.PoincareFlatIndex(4)
    index.add(np.zeros((2, 4), np.float32))
    index.save(tmp_path / "idx")
    (tmp_path / "idx" / "manifest.json").write_bytes(b"\xee\x98" + bytes(range(256)) * 4)
    with pytest.raises(
        pi.IndexFormatError, match=r"manifest\.json is not a valid manifest of a saved index: it is not UTF-8"
    ) as got:
        pi.read_index(tmp_path / "idx")
    assert len(str(got.value)) < 200
    Memory(path=tmp_path / "store").close()
    (tmp_path / "store" / "default" / "config.json").write_text('{"format": "poincare_memory", ' * 40)
    with pytest.raises(
        pi.IndexFormatError, match=r"config\.json is not a valid store configuration: it is not JSON"
    ) as got:
        Memory(path=tmp_path / "store")
    assert len(str(got.value)) < 300
