"""backoff: pure delay policies (fixed, exponential with cap, full jitter) and their rules."""

import pytest

from echomq_django.api.backoff import MAX_BACKOFF_DEPTH, Backoff, validate


@pytest.mark.parametrize("attempts", [1, 2, 7, 1000])
def test_fixed_is_the_same_on_every_attempt(attempts):
    assert Backoff.delay_ms(("fixed", 250), attempts) == 250


def test_fixed_zero_is_allowed():
    assert Backoff.delay_ms(("fixed", 0), 3) == 0


@pytest.mark.parametrize(
    "attempts, expected",
    [(1, 100), (2, 200), (3, 400), (7, 6400), (8, 10_000), (20, 10_000)],
)
def test_exponential_doubles_from_base_and_stops_at_cap(attempts, expected):
    assert Backoff.delay_ms(("exponential", 100, 10_000), attempts) == expected


def test_exponential_reaching_the_cap_exactly():
    # 1000 * 2**3 == 8000 == cap: the cap is returned, not passed.
    assert Backoff.delay_ms(("exponential", 1000, 8000), 4) == 8000
    assert Backoff.delay_ms(("exponential", 1000, 8000), 3) == 4000


def test_exponential_with_a_huge_attempt_count_returns_the_cap():
    assert Backoff.delay_ms(("exponential", 100, 10_000), 10**6) == 10_000
    assert Backoff.delay_ms(("exponential", 1, 1), 10**9) == 1
    assert Backoff.delay_ms(("exponential", 3, 2**53), 10**6) == 2**53


def test_exponential_cap_below_base_returns_cap():
    assert Backoff.delay_ms(("exponential", 500, 200), 1) == 200


def test_jitter_stays_within_zero_and_the_inner_delay_and_varies():
    policy = ("jitter", ("exponential", 100, 10_000))
    draws = [Backoff.delay_ms(policy, 3) for _ in range(2000)]
    assert all(isinstance(d, int) for d in draws)
    assert min(draws) >= 0
    assert max(draws) <= 400
    # 2000 uniform draws over 401 values: far more than a handful of distinct
    # values, and both ends of the range get close.
    assert len(set(draws)) > 200
    assert min(draws) < 40
    assert max(draws) > 360


def test_jitter_is_bounded_by_the_cap_on_late_attempts():
    policy = ("jitter", ("exponential", 100, 1000))
    draws = [Backoff.delay_ms(policy, 50) for _ in range(500)]
    assert 0 <= min(draws) and max(draws) <= 1000
    assert max(draws) > 500


def test_jitter_over_a_zero_delay_is_zero():
    assert {Backoff.delay_ms(("jitter", ("fixed", 0)), 1) for _ in range(50)} == {0}


def test_jitter_over_fixed_draws_within_fixed():
    draws = {Backoff.delay_ms(("jitter", ("fixed", 3)), 1) for _ in range(500)}
    assert draws == {0, 1, 2, 3}


def test_builders():
    assert Backoff.fixed(50) == ("fixed", 50)
    assert Backoff.exponential(100, 10_000) == ("exponential", 100, 10_000)
    assert Backoff.exponential(base_ms=100, cap_ms=10_000, jitter=True) == (
        "jitter",
        ("exponential", 100, 10_000),
    )


def test_lists_are_accepted_as_policies():
    assert validate(["jitter", ["exponential", 10, 20]]) == ("jitter", ("exponential", 10, 20))
    assert Backoff.delay_ms(["exponential", 10, 1000], 2) == 20


@pytest.mark.parametrize(
    "policy, rule",
    [
        (("fixed", -1), r"\('fixed', ms\) needs an integer ms in 0..2\*\*53"),
        (("fixed", 1.5), r"\('fixed', ms\) needs an integer ms in 0..2\*\*53"),
        (("fixed", True), r"\('fixed', ms\) needs an integer ms in 0..2\*\*53"),
        (("fixed",), r"\('fixed', ms\) needs an integer ms in 0..2\*\*53"),
        (("fixed", 1, 2), r"\('fixed', ms\) needs an integer ms in 0..2\*\*53"),
        (("exponential", 0, 100), r"needs integers base and cap in 1..2\*\*53"),
        (("exponential", 100, 0), r"needs integers base and cap in 1..2\*\*53"),
        (("exponential", 100), r"needs integers base and cap in 1..2\*\*53"),
        (("exponential", "100", 1000), r"needs integers base and cap in 1..2\*\*53"),
        (("exponential", 100, 1000.0), r"needs integers base and cap in 1..2\*\*53"),
        (("exponential", True, 1000), r"needs integers base and cap in 1..2\*\*53"),
        (("jitter",), r"\('jitter', inner\) needs one inner policy"),
        (("jitter", ("fixed", 1), ("fixed", 2)), r"\('jitter', inner\) needs one inner policy"),
        (("jitter", ("fixed", -5)), r"\('fixed', ms\) needs an integer ms in 0..2\*\*53"),
        (("jitter", ("linear", 5)), r"kind must be 'fixed', 'exponential' or 'jitter'"),
        (("fixed", 2**53 + 1), r"\('fixed', ms\) needs an integer ms in 0..2\*\*53"),
        (("exponential", 2**53 + 1, 1000), r"needs integers base and cap in 1..2\*\*53"),
        (("exponential", 100, 2**60), r"needs integers base and cap in 1..2\*\*53"),
        (("jitter", ("fixed", 2**53 + 1)), r"needs an integer ms in 0..2\*\*53"),
        (("fixed", [[[[[[[[[[1]]]]]]]]]]), r"\('fixed', ms\) needs an integer ms"),
        (("linear", 5), r"kind must be 'fixed', 'exponential' or 'jitter'"),
        ((), r"must be a non-empty tuple"),
        (None, r"must be a non-empty tuple"),
        ("fixed", r"must be a non-empty tuple"),
        (100, r"must be a non-empty tuple"),
    ],
)
def test_bad_policies_raise_value_error_naming_the_rule(policy, rule):
    with pytest.raises(ValueError, match=rule):
        Backoff.delay_ms(policy, 1)
    with pytest.raises(ValueError, match=rule):
        validate(policy)


@pytest.mark.parametrize("attempts", [0, -1, True, False, 1.0, "1", None, 2.5])
def test_attempts_must_be_an_int_of_at_least_one(attempts):
    with pytest.raises(ValueError, match="attempts must be (in 1..|an int)"):
        Backoff.delay_ms(("fixed", 10), attempts)


def test_builders_validate():
    with pytest.raises(ValueError, match=r"needs an integer ms in 0..2\*\*53"):
        Backoff.fixed(-1)
    with pytest.raises(ValueError, match=r"needs an integer ms in 0..2\*\*53"):
        Backoff.fixed(2**53 + 1)
    with pytest.raises(ValueError, match=r"base and cap in 1..2\*\*53"):
        Backoff.exponential(0, 10)
    with pytest.raises(ValueError, match=r"base and cap in 1..2\*\*53"):
        Backoff.exponential(10, 0, jitter=True)
    with pytest.raises(ValueError, match=r"base and cap in 1..2\*\*53"):
        Backoff.exponential(10, 2**53 + 1)


def test_the_largest_parameters_are_2_to_the_53():
    assert Backoff.delay_ms(("fixed", 2**53), 1) == 2**53
    assert Backoff.delay_ms(("exponential", 2**53, 2**53), 5) == 2**53


def _nested(depth, inner=("fixed", 10), as_list=False):
    """``inner`` wrapped in ``depth`` jitters."""
    policy = list(inner) if as_list else inner
    for _ in range(depth):
        policy = ["jitter", policy] if as_list else ("jitter", policy)
    return policy


@pytest.mark.parametrize("as_list", [False, True])
def test_jitter_nested_past_the_bound_is_a_value_error_not_a_recursion_error(as_list):
    assert validate(_nested(MAX_BACKOFF_DEPTH - 1, as_list=as_list)) == _nested(
        MAX_BACKOFF_DEPTH - 1)
    for depth in (MAX_BACKOFF_DEPTH, 5000):
        with pytest.raises(ValueError, match=rf"more than {MAX_BACKOFF_DEPTH} policies deep"):
            validate(_nested(depth, as_list=as_list))
        with pytest.raises(ValueError, match="policies deep"):
            Backoff.delay_ms(_nested(depth, as_list=as_list), 1)


def test_a_deeply_nested_parameter_is_reported_without_a_recursion_error():
    deep: list = [1]
    for _ in range(5000):
        deep = [deep]
    for policy in (("fixed", deep), deep, ("jitter", ("linear", deep))):
        with pytest.raises(ValueError, match="backoff"):
            validate(policy)
