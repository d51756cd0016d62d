"""Which steps are stochastic and trained: every strategy against hand-written masks."""

import pytest
import torch

from genalign.schedulers import TrainStepsConfig, select_train_steps, sliding_window_start


def _trained(
    config: TrainStepsConfig, *, steps: int = 10, samples: int = 2, iteration: int = 0, seed: int = 0
) -> torch.Tensor:
    masks = select_train_steps(
        config, num_steps=steps, num_samples=samples, iteration=iteration, generator=torch.Generator().manual_seed(seed)
    )
    assert masks.trained.shape == masks.sde.shape == (samples, steps)
    assert not bool((masks.trained & ~masks.sde).any()), "trained steps must be stochastic"
    return masks.trained


def test_all_first_k_and_first_fraction():
    assert _trained(TrainStepsConfig(strategy="all")).all()
    assert _trained(TrainStepsConfig(strategy="first_k", k=3))[0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    # Flow-GRPO: train 9 of 10 steps
    assert _trained(TrainStepsConfig(strategy="first_fraction", fraction=0.9))[1].tolist() == [1] * 9 + [0]


def test_random_subset_draws_a_fraction_per_sample():
    trained = _trained(TrainStepsConfig(strategy="random_subset", fraction=0.6), samples=16)
    assert trained.sum(1).tolist() == [6] * 16
    assert len({tuple(row.tolist()) for row in trained}) > 1, "each sample draws its own subset"


def test_sliding_window_advances_every_n_iterations_and_stops_at_the_end():
    config = TrainStepsConfig(strategy="sliding_window", stochastic="trained", window_size=4, advance_every=2)
    assert [sliding_window_start(config, num_steps=10, iteration=i) for i in (0, 1, 2, 5, 100)] == [0, 0, 1, 2, 6]
    masks = select_train_steps(config, num_steps=10, num_samples=1, iteration=5)
    assert masks.trained[0].tolist() == [0, 0, 1, 1, 1, 1, 0, 0, 0, 0]
    assert torch.equal(masks.sde, masks.trained), "MixGRPO: ODE outside the window"
    capped = TrainStepsConfig(strategy="sliding_window", window_size=2, advance_every=1, window_stride=3, max_start=4)
    assert sliding_window_start(capped, num_steps=10, iteration=1) == 3
    assert sliding_window_start(capped, num_steps=10, iteration=2) == 4


def test_random_early_window_stays_in_the_first_half():
    config = TrainStepsConfig(strategy="random_early_window", stochastic="trained", window_size=2, early_fraction=0.5)
    starts = set()
    for seed in range(30):
        row = _trained(config, seed=seed)[0]
        assert row.sum() == 2 and torch.equal(_trained(config, seed=seed)[1], row)
        first = int(row.nonzero()[0])
        assert 0 <= first <= 3
        starts.add(first)
    assert len(starts) > 1


def test_weighted_chunks_draws_whole_chunks_with_the_given_weights():
    # 10 steps in chunks of 3 -> chunks [0-2], [3-5], [6-8], [9]; weight only on chunks 0 and 2
    config = TrainStepsConfig(
        strategy="weighted_chunks", stochastic="trained", chunk_size=3, chunk_weights=[1, 0, 3, 0]
    )
    picked = {tuple(_trained(config, seed=seed)[0].nonzero().flatten().tolist()) for seed in range(40)}
    assert picked == {(0, 1, 2), (6, 7, 8)}  # whole chunks, never a zero-weight one
    counts = [sum(bool(_trained(config, seed=seed)[0, 6]) for seed in range(400))]
    assert 250 <= counts[0] <= 350  # chunk 2 drawn with probability 3/4
    two = TrainStepsConfig(strategy="weighted_chunks", chunk_size=3, num_chunks=2)
    assert all(int(_trained(two, seed=seed)[0].sum()) in (4, 6) for seed in range(20))  # 2 distinct chunks
    with pytest.raises(ValueError, match="chunk_weights has 2 entries but 10 steps in chunks of 3 make 4 chunks"):
        _trained(TrainStepsConfig(strategy="weighted_chunks", chunk_size=3, chunk_weights=[1, 1]))


def test_stochastic_all_keeps_sde_outside_the_trained_steps():
    masks = select_train_steps(TrainStepsConfig(strategy="first_k", k=2), num_steps=5, num_samples=1)
    assert masks.sde.all() and masks.trained[0].tolist() == [1, 1, 0, 0, 0]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fraction", 0.0, "fraction=0.0"),
        ("k", 0, "k=0"),
        ("window_size", 0, "window_size=0"),
        ("stochastic", "some", "stochastic='some'"),
        ("chunk_size", 0, "chunk_size=0"),
        ("num_chunks", 0, "num_chunks=0"),
    ],
)
def test_validate_names_the_bad_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainStepsConfig(**{field: value}).validate()


def test_window_larger_than_the_schedule_raises():
    with pytest.raises(ValueError, match="window_size=8 exceeds num_steps=4"):
        select_train_steps(TrainStepsConfig(strategy="sliding_window", window_size=8), num_steps=4, num_samples=1)
