"""`trnsim formats`: the table lists every format with figures that come from the format values."""

import json

from trnsim.cli import main
from trnsim.numerics import FORMATS, MX_FORMATS


def test_json_lists_every_format_with_its_figures(capsys):
    assert main(["formats", "--json", "--mx"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in data["formats"]}
    assert set(rows) == set(FORMATS)
    assert rows["float8_e4m3"]["max"] == 240 and rows["float8_e4m3"]["inf"] is True
    assert rows["float8_e4m3fn"]["max"] == 448 and rows["float8_e4m3fn"]["inf"] is False
    assert rows["float4_e2m1fn"]["min_subnormal"] == 0.5 and rows["float4_e2m1fn"]["nan"] is False
    assert rows["bfloat16"]["eps"] == 2**-7
    assert rows["float8_e4m3fn"]["torch"] == "float8_e4m3fn" and rows["float8_e4m3"]["torch"] is None
    assert rows["tfloat32"]["nki"] == "tfloat32" and rows["tfloat32"]["ml_dtypes"] is None
    assert {row["name"] for row in data["mx"]} == set(MX_FORMATS)


def test_table_shows_each_format(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    for name in FORMATS:
        assert name in out
    assert "57344" in out and "448" in out


def test_a_numerics_error_is_one_line_on_stderr_and_exit_2(capsys, monkeypatch):
    """A FormatError raised while building the table (here: a custom format float32 cannot hold)."""
    from trnsim.cli import formats as cli_formats
    from trnsim.numerics import float_format

    def refused_row(fmt):
        float_format(exponent_bits=8, mantissa_bits=7, bias=100)  # raises FormatError

    monkeypatch.setattr(cli_formats, "format_row", refused_row)
    assert main(["formats"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("trnsim: error: format 'float16_e8m7_b100': its largest exponent")
