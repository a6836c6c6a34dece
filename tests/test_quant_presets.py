"""The q4_0 x q8_1 built-in spec on the kernel guide's ranges (large, small, sparse): the reference passes, every
planted bug fails, and why sparse data stays on a product with many outputs (NMSE's denominator)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance import spec
from acceptance.device import resolve_device
from acceptance.formats import quant_kernels
from acceptance.numerics import metrics
from acceptance.session.run import run_cases
from acceptance.spec.inputs import generate

sys.path.insert(0, str(Path(__file__).parent))
import quant_mutants  # noqa: E402  (the suite's planted-bug kernels)

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "operator_specs" / "q4_0_q8_1_matmul.yaml"
PRESET_CASES = "q4_0_q8_1_matmul[float32-M=256-N=8-K=1024-preset=*]"


@pytest.fixture(scope="module")
def builtin():
    s, problems = spec.load_spec(SPEC)
    assert problems == []
    return s


def _run(s, only=PRESET_CASES, trials=None):
    return run_cases(spec.expand([s], only=only), resolve_device("cpu"), isolate=False, trials=trials)


def test_the_builtin_spec_covers_large_small_and_sparse_and_the_reference_passes_them(builtin):
    results = _run(builtin)
    assert [c.id.rsplit("-", 1)[1] for c in results] == ["preset=large]", "preset=small]", "preset=sparse]"]
    assert all(c.verdict == "pass" for c in results), [(c.id, c.reasons) for c in results]
    by = {c.id.rsplit("=", 1)[1][:-1]: c for c in results}
    # the inputs follow the presets: |w| <= 100, |w| <= 0.01 (dequantized: the block maximum is -8 d with d
    # rounded to fp16, up to 2^-11 relative above), and 90 % zeros drawn (binomial: 256 * 1024 draws,
    # std sqrt(0.9 * 0.1 / 262144) = 5.9e-4, so +- 0.003 is 5 sigma)
    made = {name: generate(spec.expand([builtin], only=c.id)[0], 0).reference[0].numpy() for name, c in by.items()}
    fp16 = 1 + 2**-11
    assert 50 < np.abs(made["large"]).max() <= 100 * fp16 and 0.005 < np.abs(made["small"]).max() <= 0.01 * fp16
    # dequantized, a drawn value also reads 0 when |x| < d/2 = block max / 16 <= 1/16: at most 0.1 / 16 more zeros
    assert 0.9 - 0.003 < (made["sparse"] == 0).mean() < 0.9 + 0.1 / 16 + 0.003
    # NMSE is scale-free: large and small land where r0 does; sparse data is ~2x worse in diff2 (the s8 fold's
    # error follows the dense activation sum of a block while the product keeps only its few nonzero weights)
    # and stays under the 3e-3 gate
    assert by["sparse"].metrics[0]["diff2"] < 3e-3


@pytest.mark.parametrize("bug", list(quant_mutants.BUGS))
def test_every_planted_bug_fails_every_range(builtin, bug):
    mutants = Path(__file__).parent / "quant_mutants.py"
    mutant = dataclasses.replace(builtin, impl=f"{mutants}:matmul_q4_0_q8_1_{bug}")
    results = _run(mutant, trials=1)  # one trial each: a bug fails it outright
    assert len(results) == 3 and all(c.verdict == "fail" for c in results), [(c.id, c.verdict) for c in results]


def _fields(blocks: np.ndarray, width: int):
    """(fp16 d, fp16 s or None, codes) of GGML rows decoded here from the bytes: q4_0 (18 B: d, 16 B of
    nibbles, low nibble element j, high element j+16) or q8_1 (36 B: d, s, 32 int8)."""
    b = blocks.reshape(-1, width)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float64)[:, 0]
    if width == 18:
        qs = b[:, 2:]
        return d, None, np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int64)
    s = b[:, 2:4].copy().view(np.float16).astype(np.float64)[:, 0]
    return d, s, b[:, 4:].view(np.int8).astype(np.int64)


def test_sparse_single_block_exact_zero_makes_nmse_infinite_within_the_kernel_bound(tmp_path):
    text = SPEC.read_text(encoding="utf-8").replace("baseline: _ops.py:", f"baseline: {ROOT}/operator_specs/_ops.py:")
    path = tmp_path / "one_block.yaml"
    path.write_text(text, encoding="utf-8")
    s, problems = spec.load_spec(path)
    assert problems == []
    s = dataclasses.replace(s, cases=[dataclasses.replace(s.cases[0], preset="sparse")])
    (case,) = spec.expand([s])
    assert case.id.endswith("M=1-N=1-K=32-preset=sparse]")
    zero_exact, infinite = 0, 0
    seeds = 200
    for seed in range(seeds):
        made = generate(dataclasses.replace(case, spec=dataclasses.replace(s, seed=seed)), 0)
        w_blocks, a_blocks = (t.numpy() for t in made.impl)
        d4, _, c = _fields(w_blocks, 18)
        d8, s8, q = _fields(a_blocks, 36)
        exact = float(d4[0] * d8[0] * np.sum((c[0] - 8) * q[0]))  # the dequantized product, exact in float64
        out = quant_kernels.matmul_q4_0_q8_1(*made.impl)
        ref = made.reference[0].double() @ made.reference[1].double().T
        assert float(ref) == exact
        if exact == 0:
            zero_exact += 1
            # E_s of acceptance.formats.quant_kernels' bound for one block: |S8 - D8 sq|; the kernel's float32
            # evaluation adds gamma_3 (|sumi D8| + 8 |S8|)
            sq = int(q[0].sum())
            e_s = (2**-11 + 2**-23) * abs(s8[0]) + 2**-11 * abs(d8[0] * sq) + 2**-24 * (1 + abs(sq))
            sumi = int(np.sum(c[0] * q[0]))
            gamma = 3 * 2**-24 / (1 - 3 * 2**-24)
            assert abs(float(out)) <= abs(d4[0]) * (8 * e_s + gamma * (abs(sumi * d8[0]) + 8 * abs(s8[0])))
            if float(out) != 0:
                nmse = metrics.compute(out, torch.zeros_like(out), dtype="float32")["nmse"]
                assert nmse == float("inf")  # sum (e - b)^2 > 0 over sum b^2 = 0
                infinite += 1
    # a product is zero unless some k has both operands drawn: P = (1 - 0.1 * 0.1)^32 = 0.725; 200 draws give
    # 145 +- 6.3 (one std), so 120..170 is 4 std
    assert 120 <= zero_exact <= 170
    assert infinite > 0  # the fold leaves a nonzero output on some of them: an infinite NMSE, not a bug
