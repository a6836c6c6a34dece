"""Quantized spec inputs: the dtype rows of the GGML formats, what each role receives, the spec errors, the
per-format NMSE gates, and the q4_0 x q8_1 spec library."""

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import yaml
from gguf import GGMLQuantizationType as GT

from acceptance.formats import dtypes
from acceptance.session.run import run_cases
from acceptance.spec import expand, load_specs, rules_for
from acceptance.spec.inputs import RoleInputs, generate

FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1"]
OPS = Path(__file__).resolve().parent.parent / "operator_specs" / "_ops.py"


def spec_file(tmp_path, inputs, cases, **extra):
    doc = {
        "name": "qmm",
        "category": "quantized",
        "impl": f"{OPS}:matmul_nt",
        "dtypes": ["float32"],
        "inputs": inputs,
        "cases": cases,
        "trials": 2,
        **extra,
    }
    path = tmp_path / "qmm.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def w_input(quant="q4_0", **more):
    return {"name": "w", "shape": ["M", "K"], "quant": quant, "dist": {"normal": [0, 1]}, **more}


def a_input(quant="q8_1", **more):
    return {"name": "a", "shape": ["N", "K"], "quant": quant, "dist": {"uniform": [-1, 1]}, **more}


#: sizeof(block_*) in ggml-common.h, added up by hand (gguf-py still lists 40 bytes for q8_1, an older layout)
BLOCK_BYTES = {
    "q4_0": 2 + 16,
    "q4_1": 2 + 2 + 16,
    "q5_0": 2 + 4 + 16,
    "q5_1": 2 + 2 + 4 + 16,
    "q8_0": 2 + 32,
    "q8_1": 2 + 2 + 32,
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_dtype_rows_match_the_c_structs(fmt):
    row = dtypes.lookup(fmt)
    assert row.kind == "block" and not row.test and not row.input
    assert (row.block, row.block_bytes) == (32, BLOCK_BYTES[fmt])
    assert fmt in dtypes.QUANT_DTYPES and fmt not in dtypes.TEST_DTYPES


@pytest.mark.parametrize("fmt", FORMATS[:-1])  # gguf-py has no q8_1 quantizer
@pytest.mark.parametrize("reference", ["dequantized", "blocks", "float"])
def test_roles_receive_blocks_and_what_the_reference_asks(tmp_path, fmt, reference):
    specs, problems = load_specs(
        [spec_file(tmp_path, [w_input(fmt, reference=reference), a_input()], [{"M": 3, "N": 2, "K": 64}])]
    )
    assert problems == []
    (case,) = expand(specs)
    made = generate(case, 0)
    assert isinstance(made, RoleInputs)
    blocks, ref = made.impl[0], made.reference[0]
    # the values drawn are what the float reference holds; gguf quantizes them to the same bytes
    x = made.reference[0].numpy() if reference == "float" else None
    if x is not None:
        assert ref.dtype == torch.float32 and ref.shape == (3, 64)
    else:
        x = _redraw_float(tmp_path, case)
    expected = gguf.quants.quantize(x.astype(np.float32), getattr(GT, fmt.upper()))
    assert blocks.dtype == torch.uint8 and np.array_equal(blocks.numpy(), expected)
    if reference == "blocks":
        assert torch.equal(ref, blocks) and ref.data_ptr() != blocks.data_ptr()
    elif reference == "dequantized":
        assert np.array_equal(ref.numpy(), gguf.quants.dequantize(expected, getattr(GT, fmt.upper())))


def _redraw_float(tmp_path, case):
    """The float values of input 0 of the case, drawn again through a float reference of the same spec."""
    import dataclasses

    inp = dataclasses.replace(case.spec.inputs[0], reference="float")
    spec = dataclasses.replace(case.spec, inputs=[inp, *case.spec.inputs[1:]])
    return generate(dataclasses.replace(case, spec=spec), 0).reference[0].numpy()


def test_q8_1_dequantized_reference_is_q_times_d(tmp_path):
    specs, _ = load_specs([spec_file(tmp_path, [w_input(), a_input()], [{"M": 2, "N": 3, "K": 32}])])
    made = generate(expand(specs)[0], 0)
    raw = made.impl[1].numpy().reshape(3, 1, 36)
    d = raw[..., 0:2].copy().view("<f2").astype(np.float32)
    q = raw[..., 4:].copy().view(np.int8).astype(np.float32)
    assert np.array_equal(made.reference[1].numpy(), (q * d).reshape(3, 32))


def test_a_spec_without_quantized_inputs_still_gets_plain_tensors(tmp_path):
    specs, _ = load_specs(
        [
            spec_file(
                tmp_path,
                [
                    {"name": "w", "shape": ["M", "K"], "dist": {"normal": [0, 1]}},
                    {"name": "a", "shape": ["N", "K"], "dist": {"normal": [0, 1]}},
                ],
                [{"M": 2, "N": 2, "K": 5}],
            )
        ]
    )
    assert isinstance(generate(expand(specs)[0], 0), list)


def problems_of(tmp_path, inputs, cases):
    _, problems = load_specs([spec_file(tmp_path, inputs, cases)])
    return [(p.field, p.message) for p in problems]


def test_k_not_a_multiple_of_32_names_the_input(tmp_path):
    found = problems_of(tmp_path, [w_input(), a_input()], [{"M": 2, "N": 2, "K": 64}, {"M": 2, "N": 2, "K": 48}])
    assert (
        "inputs[0].shape[1]",
        "input 'w': K = 48 for cases[1] (M=2, N=2, K=48) is not a multiple of 32, the q4_0 block size",
    ) in found
    assert any(f == "inputs[1].shape[1]" and "input 'a'" in m and "q8_1" in m for f, m in found)


def test_inf_and_nan_are_rejected(tmp_path):
    specials = {"specials": {"fraction": 0.1, "values": [float("inf"), 1.0], "of": {"normal": [0, 1]}}}
    found = problems_of(tmp_path, [{**w_input(), "dist": specials}, a_input()], [{"M": 2, "N": 2, "K": 32}])
    assert found == [("inputs[0].dist", "inf: input 'w' is quantized to q4_0, which cannot encode inf or NaN")]


def test_field_errors(tmp_path):
    found = problems_of(
        tmp_path,
        [
            w_input("q3_k"),
            a_input(dtype="int8"),
            {"name": "x", "shape": ["K"], "dist": {"normal": [0, 1]}, "reference": "float"},
        ],
        [{"M": 2, "N": 2, "K": 32}],
    )
    fields = dict(found)
    assert "q3_k" in fields["inputs[0].quant"] and "q4_0" in fields["inputs[0].quant"]
    assert "not both" in fields["inputs[1]"]
    assert "quantized input only" in fields["inputs[2]"]


def test_a_block_scale_overflowing_fp16_is_a_case_error_naming_the_input(tmp_path):
    # q4_0 stores d = max / -8 in fp16: |max| = 1e6 gives |d| = 125000 > 65504
    inputs = [{**w_input(), "dist": {"uniform": [999_000, 1_000_000]}}, a_input()]
    specs, _ = load_specs([spec_file(tmp_path, inputs, [{"M": 1, "N": 1, "K": 32}])])
    (result,) = run_cases(expand(specs), torch.device("cpu"), isolate=False)
    assert result.verdict == "error" and "input 'w'" in result.error and "beyond the fp16 range" in result.error


@pytest.mark.parametrize(
    "formats, gate",
    [(("q4_0", "q8_1"), 0.015), (("q5_1", "q8_0"), 0.01), (("q8_0", "q8_1"), 0.005), (("q4_1", "q5_0"), 0.015)],
)
def test_nmse_gate_is_the_coarsest_formats(tmp_path, formats, gate):
    specs, _ = load_specs(
        [spec_file(tmp_path, [w_input(formats[0]), a_input(formats[1])], [{"M": 1, "N": 1, "K": 32}])]
    )
    rules = rules_for(expand(specs)[0])
    assert [(t.metric, t.value, t.comparison) for t in rules.thresholds] == [("nmse", gate, "<=")]
    assert rules.dual_delta is None and not rules.diff4
