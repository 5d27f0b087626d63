"""The batched sampler (engine/sampling.sample_tokens) against the one-row reference (`sample_token`,
`reference_probabilities`, `apply_repetition_penalty`): greedy picks identical, the same distributions exactly
(filters) and statistically (draws), per-row seeds independent of the batch, and one launch sequence whatever the
batch size (no per-row loop, no host read but the last)."""

from __future__ import annotations

import random

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine import sampling
from engine.sampling import (
    RowSampling,
    SamplingParams,
    apply_repetition_penalty,
    make_generator,
    reference_probabilities,
    sample_token,
    sample_tokens,
)

# The checkpoint's recommended settings (what real traffic uses), and the other shapes a request can take.
DEFAULTS = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
SETTINGS = {
    "checkpoint defaults": DEFAULTS,
    "top-k, top-p, min-p": SamplingParams(temperature=0.8, top_k=6, top_p=0.8, min_p=0.05),
    "top-p only": SamplingParams(temperature=1.0, top_p=0.7),
    "min-p only": SamplingParams(temperature=1.3, min_p=0.1),
    "temperature only": SamplingParams(temperature=0.9),
    "top-k only": SamplingParams(temperature=1.0, top_k=3),
}


def _logits(rows: int, vocab: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale


def _old_greedy(logits: torch.Tensor, rows: list[RowSampling]) -> list[int]:
    """What pick_tokens did before the batched sampler: the penalty row by row, then one argmax."""
    logits = logits.clone()
    for i, row in enumerate(rows):
        if row.params.repetition_penalty != 1.0:
            apply_repetition_penalty(logits[i], row.seen, row.params.repetition_penalty)
    return logits.argmax(-1).tolist()


def test_greedy_picks_are_the_old_ones() -> None:
    vocab = 5000
    logits = _logits(12, vocab, seed=1)
    logits[3, 100:200] = float("-inf")  # masked ids (a grammar, the padded vocabulary)
    logits[5] = logits[5].bfloat16().float()  # bf16 logits: ties, the first maximum wins
    logits[5, 7] = logits[5, 8] = logits[5].max()
    gen = torch.Generator().manual_seed(2)
    rows = [
        RowSampling(
            SamplingParams(temperature=0, repetition_penalty=1.0 if i % 3 == 0 else 1.1 + 0.2 * i),
            None,
            torch.rand(vocab, generator=gen) < 0.3,
        )
        for i in range(12)
    ]
    assert sample_tokens(logits, rows) == _old_greedy(logits, rows)
    # Sampled rows beside them change nothing for the greedy ones.
    mixed = [row if i % 2 else RowSampling(DEFAULTS, make_generator(i)) for i, row in enumerate(rows)]
    picked = sample_tokens(logits, mixed)
    old = _old_greedy(logits, rows)
    assert all(picked[i] == old[i] for i in range(1, 12, 2))
    assert sample_tokens(logits.clone(), rows) == sample_tokens(logits, rows)  # logits untouched


def test_forced_rows_are_skipped_and_draw_nothing() -> None:
    logits = _logits(3, 50, seed=3)
    generator = make_generator(5)
    picked = sample_tokens(logits, [None, RowSampling(DEFAULTS, generator), None])
    assert picked[0] is None and picked[2] is None and isinstance(picked[1], int)
    again = make_generator(5)
    again.random()  # one draw per sampled step, none for the forced rows
    assert generator.random() == again.random()
    assert sample_tokens(logits, [None, None, None]) == [None, None, None]
    with pytest.raises(ValueError, match="rows"):
        sample_tokens(logits, [None])
    with pytest.raises(ValueError, match="seen"):
        sample_tokens(logits[:1], [RowSampling(SamplingParams(repetition_penalty=1.2), make_generator(1))])


def _batched_probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The batched sampler's own distribution for every row (its filters, before the draw), normalized."""
    rows = [RowSampling(params, make_generator(i)) for i in range(logits.shape[0])]
    values = sampling._row_values(rows, logits.device)
    vocab = logits.shape[-1]
    if 0 < params.top_k < vocab:
        ids, weights = sampling._windowed_weights(logits, values, params.top_k)
        weights = torch.zeros_like(logits).scatter_(1, ids, weights)
    else:
        weights = sampling._full_weights(logits, values, params.min_p > 0, params.top_p < 1)
    return weights / weights.sum(-1, keepdim=True)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_filters_keep_exactly_the_reference_s_tokens(name: str) -> None:
    """Continuous logits (no ties): the same kept tokens as the reference's full sort, the same probabilities."""
    params = SETTINGS[name]
    logits = _logits(16, 3000, seed=list(SETTINGS).index(name), scale=2.0)
    got = _batched_probabilities(logits, params)
    for row in range(16):
        want = reference_probabilities(logits[row], params)
        assert torch.equal(got[row] > 0, want > 0), f"{name}: kept tokens differ in row {row}"
        torch.testing.assert_close(got[row], want, rtol=1e-4, atol=1e-7)


def test_top_k_keeps_the_ties_with_the_k_th_value() -> None:
    # bf16-like logits: the third value is shared by four tokens; top_k 3 keeps all of them, as the reference does.
    logits = torch.tensor([[4.0, 3.5, 2.0, 2.0, 1.0, 2.0, 0.5, 2.0, -1.0]])
    params = SamplingParams(temperature=1.0, top_k=3)
    got = _batched_probabilities(logits, params)[0]
    want = reference_probabilities(logits[0], params)
    assert (got > 0).sum() == 6 and torch.equal(got > 0, want > 0)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_draws_follow_the_reference_distribution(name: str) -> None:
    """20,000 rows of one small-vocabulary row, each with its own seeded generator, drawn in one call: the
    empirical distribution is within a total-variation bound of the reference (expected ~0.01, bound 0.04) and its
    chi-square statistic far below a generous bound; never a token the reference excludes. Seeded: no flake."""
    params = SETTINGS[name]
    vocab, draws = 24, 20_000
    row = _logits(1, vocab, seed=7, scale=1.5)[0]
    want = reference_probabilities(row, params).double()
    rows = [RowSampling(params, make_generator(1_000 + i)) for i in range(draws)]
    picked = sample_tokens(row.expand(draws, vocab).contiguous(), rows)
    counts = torch.bincount(torch.tensor(picked), minlength=vocab).double()
    assert counts[want == 0].sum() == 0, f"{name}: drew an excluded token"
    total_variation = 0.5 * (counts / draws - want).abs().sum().item()
    assert total_variation < 0.04, f"{name}: TV {total_variation:.4f}"
    support = want > 0
    expected = want[support] * draws
    chi_square = ((counts[support] - expected) ** 2 / expected).sum().item()
    dof = int(support.sum()) - 1
    assert chi_square < 3 * dof + 30, f"{name}: chi-square {chi_square:.1f} with {dof} degrees of freedom"
    # A wrong distribution (another row's) is far outside the bound: the bound can tell them apart.
    wrong = reference_probabilities(row.flip(0), params).double()
    assert 0.5 * (wrong - want).abs().sum() > 0.2


def test_a_seed_gives_the_same_tokens_whatever_the_batch() -> None:
    """A seeded row alone and the same row among others (greedy, penalized, other settings, other seeds, other
    vocabulary paths): the same 40 tokens. A different seed: different tokens."""
    vocab, steps = 2000, 40
    steps_logits = [_logits(1, vocab, seed=100 + t)[0] for t in range(steps)]

    def run(seed: int, neighbours: int) -> list[int]:
        generator = make_generator(seed)
        others = [make_generator(50 + j) for j in range(neighbours)]
        tokens = []
        for t, row_logits in enumerate(steps_logits):
            batch = _logits(neighbours + 1, vocab, seed=10_000 + t)
            where = t % (neighbours + 1)
            batch[where] = row_logits
            rows: list[RowSampling | None] = [
                [
                    RowSampling(SamplingParams(temperature=0)),
                    RowSampling(SETTINGS["top-p only"], None),
                    RowSampling(SETTINGS["top-k, top-p, min-p"], others[j]),
                    RowSampling(
                        SamplingParams(temperature=0.7, repetition_penalty=1.3), others[j], batch[0] > 1
                    ),
                    None,
                ][j % 5]
                for j in range(neighbours)
            ]
            rows.insert(where, RowSampling(DEFAULTS, generator))
            tokens.append(sample_tokens(batch, rows)[where])
        return tokens

    alone = run(7, 0)
    assert run(7, 9) == alone and run(7, 4) == alone
    assert run(8, 0) != alone
    assert len(set(alone)) > 3  # the row really samples


_METADATA_ONLY = {
    torch.ops.aten.view,
    torch.ops.aten._unsafe_view,
    torch.ops.aten.alias,
    torch.ops.aten.detach,
}


class _CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []  # (op, last dimension of its first argument)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func.overloadpacket in _METADATA_ONLY:  # a view launches nothing
            return func(*args, **(kwargs or {}))
        first = args[0] if args and isinstance(args[0], torch.Tensor) and args[0].dim() else None
        self.ops.append((str(func.overloadpacket), first.shape[-1] if first is not None else 0))
        return func(*args, **(kwargs or {}))


VOCAB = 4096


def _ops(batch: int, sampler) -> list[tuple[str, int]]:  # noqa: ANN001
    vocab = VOCAB
    logits = _logits(batch, vocab, seed=batch)
    settings = [DEFAULTS, SETTINGS["top-p only"], SamplingParams(temperature=0, repetition_penalty=1.2)]
    rows = [RowSampling(settings[i % 3], make_generator(i), logits[i] > 2) for i in range(batch)]
    with _CountOps() as counter:
        sampler(logits, rows)
    return counter.ops


def _old_sampler(logits: torch.Tensor, rows: list[RowSampling]) -> list[int]:
    """pick_tokens' sampling before the batched sampler: penalty, then a sampler call, row by row."""
    logits = logits.clone()
    for i, row in enumerate(rows):
        if row.params.repetition_penalty != 1.0:
            apply_repetition_penalty(logits[i], row.seen, row.params.repetition_penalty)
    greedy = logits.argmax(-1).tolist()
    gen = torch.Generator().manual_seed(0)
    return [
        greedy[i] if r.params.greedy else sample_token(logits[i], r.params, gen) for i, r in enumerate(rows)
    ]


@pytest.mark.parametrize("sampler", [sample_tokens, _old_sampler], ids=["batched", "old"])
def test_one_launch_sequence_whatever_the_batch_size(sampler) -> None:  # noqa: ANN001
    """The ops the sampler runs do not grow with the batch (no per-row loop), none reads a value back to the host
    (aten::item, nonzero for a boolean index: a GPU sync each) and none sorts the vocabulary. The old per-row
    sampler fails this: it is kept here to show the test can fail."""
    small, large = _ops(3, sampler), _ops(24, sampler)
    host_reads = [op for op, _ in large if op.endswith(("_local_scalar_dense", "nonzero", "item"))]
    vocabulary_sorts = [op for op, width in large if op.endswith("sort") and width == VOCAB]
    problems = []
    if len(large) != len(small):
        problems.append(f"{len(small)} ops at batch 3, {len(large)} at batch 24")
    if host_reads:
        problems.append(f"{len(host_reads)} host reads")
    if vocabulary_sorts:
        problems.append(f"{len(vocabulary_sorts)} sorts of the vocabulary")
    if sampler is sample_tokens:
        assert not problems, problems
    else:
        assert len(problems) == 3, "the old sampler loops per row, reads back and sorts"


def test_uniforms_come_from_each_row_s_own_generator() -> None:
    generator = make_generator(3)
    values = sampling._row_values([RowSampling(DEFAULTS, generator)] * 2, torch.device("cpu"))
    reference = random.Random(3)
    assert values.uniform.flatten().tolist() == [reference.random(), reference.random()]
    assert values.top_k.dtype == torch.int64 and values.top_k.flatten().tolist() == [20, 20]
