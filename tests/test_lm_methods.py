"""The language-model runner's method table (:data:`ecosim.recipes.LM_METHODS`): every name,
its parts and label, and the errors naming every accepted method (NumPy only, no torch)."""
import pytest

from ecosim import recipes
from ecosim.experiments import base as B
from ecosim.experiments.lm import OTHER_METHODS, LMTableConfig, method_parts
from ecosim.experiments.lm_finetune import FINETUNE_METHODS


def test_the_table_holds_every_runner_method_in_order():
    assert list(recipes.LM_METHODS) == [
        "fp32", "bf16_master", "fp8_master_rtn", "fp8_master_sr", "fp8_naive_rtn",
        "fp8_naive_sr", "fp8_eco_rtn", "fp8_eco_sr", "dqt8_sr", "dqt_ternary_sr",
        "bitnet_b158", "int4_master_rtn", "int4_master_sr", "int4_naive_rtn", "int4_naive_sr",
        "int4_eco_rtn", "int4_eco_sr", "fp8_ecomx_rtn", "fp8_ecomx_sr", "fp8_ecowd_rtn",
        "fp8_ecowd_sr", "fp8_ecoguard_rtn", "fp8_ecoguard_sr"]
    assert FINETUNE_METHODS == recipes.lm_methods("int4") == tuple(
        row.run_name("int4") for row in recipes.TABLE1 if row.weights == "W")
    assert recipes.lm_methods(kind="dqt") == ("dqt8_sr", "dqt_ternary_sr")


@pytest.mark.parametrize("name, parts, fmt, granularity, label", [
    ("fp32", ("fp32", "fp", "rtn"), None, "row", "FP32 (no quantization)"),
    ("bf16_master", ("bf16", "master", "rtn"), "bfloat16", "row", "BF16 w/ master"),
    ("fp8_eco_sr", ("e4m3", "eco", "sr"), "float8_e4m3fn", "row", "FP8 ECO + SR"),
    ("int4_naive_rtn", ("int4", "naive", "rtn"), "int4", "tensor", "INT4 naive + RTN"),
    ("dqt8_sr", ("int8", "dqt", "sr"), "int8", "row", "DQT INT8 + SR"),
    ("dqt_ternary_sr", ("ternary", "dqt", "sr"), "ternary", "row", "DQT ternary + SR"),
    ("bitnet_b158", ("ternary", "bitnet", "rtn"), "ternary", "row", "BitNet b1.58"),
    ("fp8_ecomx_sr", ("e4m3", "eco_adam", "sr"), "float8_e4m3fn", "row",
     "FP8 ECO momentum-exact + SR")])
def test_parts_format_and_label(name, parts, fmt, granularity, label):
    m = recipes.lm_method(name)
    assert (method_parts(name), m.fmt, m.granularity, m.label) == (parts, fmt, granularity, label)


def test_table1_rows_keep_the_papers_labels_and_parts():
    for row in recipes.TABLE1:
        for fmt in recipes.WEIGHT_FORMATS:
            m = recipes.lm_method(row.run_name(fmt))
            assert m.label == row.label(fmt) and m.kind == "table1"
            assert (m.scheme, m.mode) == (row.scheme, row.mode)
    assert OTHER_METHODS == {"dqt8_sr": ("int8", "dqt", "sr"),
                             "dqt_ternary_sr": ("ternary", "dqt", "sr"),
                             "bitnet_b158": ("ternary", "bitnet", "rtn")}


def test_an_unknown_method_names_every_accepted_one():
    with pytest.raises(ValueError, match="unknown method 'fp8_eco'") as exc:
        method_parts("fp8_eco")
    assert all(repr(n) in str(exc.value) for n in recipes.LM_METHODS)
    with pytest.raises(B.ConfigError, match="LMTableConfig.methods: unknown method") as exc:
        LMTableConfig(methods=("fp32", "int4_eco"))
    assert "'bitnet_b158'" in str(exc.value) and "'int4_eco_sr'" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_eco_adam_variants_are_ecos_schemes_and_options():
    """fp8_ecomx_*: scheme eco_momentum_exact; fp8_ecowd_*: ECO with wd_corrected_injection;
    fp8_ecoguard_*: ECO with schedule_guard; all FP8 E4M3 row-wise."""
    got = {n: (m.scheme, m.mode, m.wd_corrected, m.schedule_guard)
           for n, m in recipes.LM_METHODS.items() if m.kind == "eco_adam"}
    assert got == {f"fp8_{v}_{mode}": (s, mode, v == "ecowd", v == "ecoguard")
                   for v, s in (("ecomx", "eco_momentum_exact"), ("ecowd", "eco"),
                                ("ecoguard", "eco")) for mode in ("rtn", "sr")}
    assert all(recipes.LM_METHODS[n].fmt == "float8_e4m3fn" for n in got)
