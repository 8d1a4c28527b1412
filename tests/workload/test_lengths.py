"""LengthDist: parsing, printing, sampling and the mean of what is sampled."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_knee.workload.lengths import MAX_LENGTH, LengthDist, parse

lengths = st.integers(min_value=1, max_value=MAX_LENGTH)


def floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)


dists = st.one_of(
    lengths.map(LengthDist.fixed),
    st.builds(
        LengthDist.normal,
        floats(1, MAX_LENGTH),
        floats(0, MAX_LENGTH),
    ),
    st.tuples(lengths, lengths).map(lambda ab: LengthDist.uniform(min(ab), max(ab))),
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512", LengthDist.fixed(512)),
        (" fixed:7 ", LengthDist.fixed(7)),
        ("normal:512,64", LengthDist.normal(512, 64)),
        ("NORMAL: 100.5 , 0", LengthDist.normal(100.5, 0)),
        ("uniform:256,768", LengthDist.uniform(256, 768)),
        ("uniform:3,3", LengthDist.uniform(3, 3)),
        ("1e3", LengthDist.fixed(1000)),
    ],
)
def test_parse_reads_every_documented_form(text: str, expected: LengthDist) -> None:
    assert parse(text) == expected


def test_default_is_fixed_512_and_str_gives_the_parseable_form() -> None:
    assert LengthDist() == LengthDist.fixed(512)
    assert str(LengthDist.fixed(512)) == "512"
    assert str(LengthDist.normal(512, 64)) == "normal:512,64"
    assert str(LengthDist.normal(512.25, 0.5)) == "normal:512.25,0.5"
    assert str(LengthDist.uniform(256, 768)) == "uniform:256,768"


def test_fields_of_other_kinds_do_not_affect_equality() -> None:
    assert LengthDist(kind="normal", length=99, mu=10, sigma=2) == LengthDist.normal(10, 2)
    assert LengthDist(kind="uniform", mu=3.0, low=1, high=2) == LengthDist.uniform(1, 2)


@given(dists)
def test_str_round_trips_through_parse(dist: LengthDist) -> None:
    assert parse(str(dist)) == dist


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0", "at least 1 token"),
        ("-5", "at least 1 token"),
        ("uniform:0,10", "uniform low must be at least 1 token"),
        ("uniform:768,256", "low (768) is greater than high (256)"),
        ("normal:512,-1", "stdev must be a finite number from 0"),
        ("normal:0,10", "mean must be a finite number of tokens from 1"),
        ("normal:nan,1", "must be a finite number"),
        ("normal:512", "normal takes mean,stdev (2 values)"),
        ("uniform:1,2,3", "uniform takes low,high (2 values)"),
        ("uniform:1.5,3", "must be a whole number of tokens"),
        ("12.5", "must be a whole number of tokens"),
        ("abc", "'abc' is not a number"),
        ("normal:abc,1", "mean 'abc'"),
        ("poisson:3", "unknown length kind 'poisson'"),
        ("", "empty token length"),
        (str(MAX_LENGTH + 1), f"at most {MAX_LENGTH} tokens"),
    ],
)
def test_bad_lengths_say_what_is_wrong_and_show_a_correct_value(text: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(text)
    message = str(info.value)
    assert says in message
    assert 'e.g. "' in message  # a correct example is always shown


def test_constructors_validate_too() -> None:
    with pytest.raises(ValueError, match="at least 1 token"):
        LengthDist.fixed(0)
    with pytest.raises(ValueError, match="whole number"):
        LengthDist.fixed(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown length kind"):
        LengthDist(kind="poisson")  # type: ignore[arg-type]


@settings(max_examples=50)
@given(st.tuples(lengths, lengths), st.integers(0, 2**32))
def test_uniform_samples_stay_within_bounds_and_reach_both(bounds: tuple[int, int], seed: int) -> None:
    low, high = min(bounds), max(bounds)
    dist = LengthDist.uniform(low, high)
    rng = np.random.default_rng(seed)
    samples = [dist.sample(rng) for _ in range(200)]
    assert all(low <= s <= high for s in samples)
    assert all(isinstance(s, int) for s in samples)
    if high - low <= 3:  # with few values all of them show up in 200 draws
        assert set(samples) == set(range(low, high + 1))


@settings(max_examples=50)
@given(
    floats(1, 5000),
    floats(0, 5000),
    st.integers(0, 2**32),
)
def test_normal_samples_are_whole_and_never_below_one(mu: float, sigma: float, seed: int) -> None:
    dist = LengthDist.normal(mu, sigma)
    rng = np.random.default_rng(seed)
    samples = [dist.sample(rng) for _ in range(200)]
    assert all(isinstance(s, int) and 1 <= s <= MAX_LENGTH for s in samples)
    assert min(samples) >= dist.minimum


@pytest.mark.parametrize(("mu", "sigma"), [(512, 64), (1, 5), (3, 1), (20, 30), (100, 5000), (7.5, 0.0)])
def test_normal_mean_matches_the_mean_of_many_samples(mu: float, sigma: float) -> None:
    dist = LengthDist.normal(mu, sigma)
    rng = np.random.default_rng(12345)
    samples = np.array([dist.sample(rng) for _ in range(100_000)], dtype=float)
    tolerance = 5 * samples.std() / math.sqrt(len(samples)) + 1e-9
    assert abs(samples.mean() - dist.mean) <= tolerance


def test_clipping_at_one_raises_the_mean_above_mu() -> None:
    # Half the draws of N(1, 5) fall below 1 and are clipped up: the realised mean is near 1 + 5*0.4.
    assert LengthDist.normal(1, 5).mean == pytest.approx(2.99, abs=0.01)
    assert LengthDist.normal(512, 64).mean == pytest.approx(512, abs=1e-9)
    # Half to even, as numpy rounds: a stdev of 0 always gives the rounded mean.
    assert LengthDist.normal(7.5, 0).mean == 8
    assert LengthDist.normal(6.5, 0).mean == 6


def test_fixed_and_uniform_means_and_minimum() -> None:
    assert LengthDist.fixed(300).mean == 300
    assert LengthDist.uniform(256, 768).mean == 512
    assert LengthDist.uniform(256, 768).minimum == 256
    assert LengthDist.normal(512, 64).minimum == 1
    assert LengthDist.fixed(300).sample(np.random.default_rng(0)) == 300
