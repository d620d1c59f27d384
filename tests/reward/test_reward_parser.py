"""Parsing: every operator, function, aggregation and alias; every error type with position."""

from __future__ import annotations

import pytest

from derl_bench.reward import (
    AGGREGATIONS,
    ALIASES,
    FUNCTIONS,
    MAX_DEPTH,
    MAX_LENGTH,
    MAX_POWER,
    AggregationError,
    ForbiddenConstructError,
    InputTooLongError,
    MetaRewardError,
    MetaRewardSyntaxError,
    NumberError,
    TooDeepError,
    UnknownDomainError,
    UnknownPrimitiveError,
    compile_reward,
    known_primitives,
)
from derl_bench.reward.nodes import Agg, Call, Neg, Num, Pow, Prim, Prod, Sum
from derl_bench.reward.parser import parse

OFFICIAL = "g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5)))"


@pytest.mark.parametrize("domain", ["math", "agent"])
@pytest.mark.parametrize(
    "expr",
    [
        OFFICIAL,
        "g1 * g2",
        "(g1 + g2) / 2",
        "g1",
        "g1 - g2 + g3 * g4",
        "0.5*g1+0.5*g2",
        "g1**2",
        "-g1",
    ],
)
def test_official_expressions_compile_as_written(domain, expr):
    reward = compile_reward(expr, domain=domain)
    assert reward.primitives
    assert set(reward.primitives) <= set(known_primitives(domain))


def test_operators_build_the_expected_tree():
    assert parse("outcome + 1 - 2", "math") == Sum(
        ((1, Prim("outcome")), (1, Num(1.0)), (-1, Num(2.0)))
    )
    assert parse("outcome * 2 / 4", "math") == Prod(
        ((False, Prim("outcome")), (False, Num(2.0)), (True, Num(4.0)))
    )
    assert parse("-outcome", "math") == Neg(Prim("outcome"))
    assert parse("--outcome", "math") == Prim("outcome")
    assert parse("+outcome", "math") == Prim("outcome")
    assert parse("outcome**3", "math") == Pow(Prim("outcome"), 3)
    assert parse("-outcome**2", "math") == Neg(Pow(Prim("outcome"), 2))  # as in Python
    assert parse("(outcome)", "math") == Prim("outcome")
    assert parse("1 + 2 * outcome", "math") == Sum(
        ((1, Num(1.0)), (1, Prod(((False, Num(2.0)), (False, Prim("outcome"))))))
    )


@pytest.mark.parametrize(
    "text,value",
    [
        ("2", 2.0),
        ("0.5", 0.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e3", 1000.0),
        ("2.5E-2", 0.025),
        ("1e+2", 100.0),
    ],
)
def test_number_literals(text, value):
    assert parse(text, "math") == Num(value)


@pytest.mark.parametrize("fn", sorted(FUNCTIONS))
def test_every_function_parses(fn):
    low = FUNCTIONS[fn][0]
    args = ", ".join(["outcome"] * low)
    node = parse(f"{fn}({args})", "math")
    assert node == Call(fn, tuple(Prim("outcome") for _ in range(low)))


@pytest.mark.parametrize("fn", AGGREGATIONS)
def test_every_aggregation_parses(fn):
    assert parse(f"{fn}(success * 2)", "agent") == Agg(
        fn, Prod(((False, Prim("success")), (False, Num(2.0))))
    )


def test_min_max_arity_picks_aggregation_or_pointwise():
    assert isinstance(parse("max(success)", "agent"), Agg)
    assert isinstance(parse("max(success, failed)", "agent"), Call)
    assert isinstance(parse("min(success, failed, 1)", "agent"), Call)


@pytest.mark.parametrize("domain", sorted(ALIASES))
def test_alias_tables_expand_to_their_definitions(domain):
    for alias, text in ALIASES[domain].items():
        assert parse(alias, domain) == parse(text, domain)


def test_alias_tables_match_the_paper():
    assert [parse(f"g{i}", "math") for i in range(1, 5)] == [
        Prim("outcome"),
        Prim("format_boxed"),
        Prim("cot_steps"),
        Prim("loose_outcome"),
    ]
    assert parse("g1", "agent") == Prim("success")
    assert [parse(f"g{i}", "agent") for i in (2, 3, 4)] == [
        Agg(fn, Prim("env_reward")) for fn in ("first_third", "mid_third", "last_third")
    ]


def test_custom_primitive_list_replaces_the_domain_names():
    reward = compile_reward(
        "my_signal + 2 * outcome", domain="math", primitives=["my_signal", "outcome"]
    )
    assert reward.primitives == ("my_signal", "outcome")
    with pytest.raises(UnknownPrimitiveError):
        compile_reward("format_boxed", domain="math", primitives=["my_signal"])
    with pytest.raises(ForbiddenConstructError):
        compile_reward("1", domain="math", primitives=["mean"])
    with pytest.raises(MetaRewardSyntaxError):
        compile_reward("1", domain="math", primitives=["not a name"])


# -- errors ---------------------------------------------------------------------------------
def _error(expr: str, domain: str = "agent") -> MetaRewardError:
    with pytest.raises(MetaRewardError) as info:
        compile_reward(expr, domain=domain)
    return info.value


@pytest.mark.parametrize(
    "expr,position",
    [
        ("g1 +", 4),
        ("g1 g2", 3),
        ("(g1", 0),
        ("g1)", 2),
        ("", 0),
        ("g1 + * g2", 5),
        ("clip(g1, 0)", 0),
        ("abs(g1, g2)", 0),
        ("min(g1,)", 7),
        ("2x", 0),
        ("1e", 0),
        ("g1 ? g2", 3),
        ("g1 + \x00", 5),
        ("g1 \u2212 g2", 3),
        ("\uff47\uff11", 0),
        ("sqrt + 1", 0),
        ("g1 $", 3),
        ("`g1`", 0),
    ],
)
def test_syntax_errors_carry_a_position(expr, position):
    err = _error(expr)
    assert type(err) is MetaRewardSyntaxError
    assert err.position == position
    assert f"position {position}" in str(err)


def test_lookalike_characters_get_a_hint():
    assert "did you mean '-'" in str(_error("g1 \u2212 g2"))
    assert "did you mean 'g'" in str(_error("\uff47\uff11"))
    assert "U+0430" in str(_error("g1 + \u0430"))  # Cyrillic a


def test_unknown_primitive_suggests_close_names():
    err = _error("g1 + sucess")
    assert isinstance(err, UnknownPrimitiveError)
    assert err.position == 5 and err.name == "sucess"
    assert err.suggestions[0] == "success"
    assert "did you mean 'success'" in str(err)
    assert _error("zzzz").suggestions == ()


@pytest.mark.parametrize(
    "expr,position,fragment",
    [
        ("g1.real", 2, "attribute"),
        ("(g1).real", 4, "attribute"),
        ("g1[0]", 2, "subscript"),
        ("lambda: 1", 0, "lambda"),
        ("[x for x in g1]", 0, "subscript"),
        ("g1 for", 3, "comprehension"),
        ("'abc'", 0, "string"),
        ('"g1"', 0, "string"),
        ("__import__('os')", 0, "dunder"),
        ("g1.__class__", 2, "attribute"),
        ("open(g1)", 0, "call to 'open'"),
        ("open('f')", 5, "string"),
        ("exp(g1)", 0, "call to 'exp'"),
        ("g1(2)", 0, "not callable"),
        ("g1 if g2 else g3", 3, "conditional"),
        ("g1 and g2", 3, "boolean"),
        ("not g1", 0, "boolean"),
        ("g1 == 1", 3, "comparison"),
        ("g1 < 1", 3, "comparison"),
        ("min(g1, key=g2)", 11, "keyword"),
        ("g1 // 2", 3, "floor division"),
        ("g1 % 2", 3, "%"),
        ("g1 ^ 2", 3, "bitwise"),
        ("{g1}", 0, "dict"),
        ("g1; g2", 2, "statement"),
        ("g1 # c", 3, "comment"),
        ("(g1)(2)", 4, "called"),
        ("import os", 0, "import"),
    ],
)
def test_forbidden_constructs(expr, position, fragment):
    err = _error(expr)
    assert isinstance(err, ForbiddenConstructError)
    assert err.position == position
    assert fragment in str(err)


@pytest.mark.parametrize(
    "expr", ["9**9**9", "g1**9", "g1**-1", "g1**0.5", "g1**(2)", "2**g1", "1e999", "g1 * 1e400"]
)
def test_number_errors(expr):
    err = _error(expr)
    assert isinstance(err, NumberError)
    assert err.position is not None


def test_power_limit_is_inclusive():
    assert compile_reward(f"g1**{MAX_POWER}", domain="math").canonical == f"outcome**{MAX_POWER}"


@pytest.mark.parametrize(
    "expr,position",
    [
        ("mean(last(success))", 0),
        ("sum(g2)", 0),
        ("max(mean(success))", 0),
        ("first_third(1 + mid_third(success))", 0),
        ("g1 + mean(max(success))", 5),
    ],
)
def test_nested_trajectory_terms_are_rejected(expr, position):
    err = _error(expr)
    assert isinstance(err, AggregationError)
    assert err.position == position


def test_pointwise_max_of_trajectory_terms_is_fine():
    assert compile_reward("max(mean(success), g2)", domain="agent").structure.bounded


def test_input_too_long():
    err = _error("g1 + " * (MAX_LENGTH // 5) + "g1" + " " * 10)
    assert isinstance(err, InputTooLongError)
    long_ok = "+".join(["g1"] * (MAX_LENGTH // 3))
    assert len(long_ok) <= MAX_LENGTH
    assert compile_reward(long_ok, domain="math").canonical == f"{MAX_LENGTH // 3} * outcome"


def test_too_deep():
    ok = "(" * MAX_DEPTH + "g1" + ")" * MAX_DEPTH
    assert compile_reward(ok, domain="math").canonical == "outcome"
    err = _error("(" * (MAX_DEPTH + 1) + "g1" + ")" * (MAX_DEPTH + 1))
    assert isinstance(err, TooDeepError)
    assert err.position == MAX_DEPTH
    assert isinstance(_error("abs(" * 40 + "g1" + ")" * 40), TooDeepError)
    assert isinstance(_error("(" * 100_000 + "g1" + ")" * 100_000), InputTooLongError)


def _accepted(expr: str, domain: str = "agent"):
    try:
        return compile_reward(expr, domain=domain)
    except MetaRewardError:
        return None


def test_an_accepted_expressions_canonical_form_is_accepted_too():
    # g4 is last_third(env_reward) in the agent domain: written out, an alias grows 11-fold and
    # nests one call deeper; 1/3 is printed with 16 digits.
    near_the_limits = [
        *("*".join(["g4"] * n) for n in (100, 163, 164, 300, MAX_LENGTH // 3)),
        *("abs(" * n + "g4" + ")" * n for n in (MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH)),
        *("+".join(f"{i}/3*sqrt(g{i % 4 + 1})" for i in range(1, n)) for n in (80, 200)),
    ]
    accepted = [r for r in map(_accepted, near_the_limits) if r is not None]
    assert 0 < len(accepted) < len(near_the_limits)
    for reward in accepted:
        again = compile_reward(reward.canonical, domain="agent")
        assert (again.canonical, again.hash) == (reward.canonical, reward.hash)


def test_an_expression_whose_canonical_form_is_over_the_limits_is_refused(capsys):
    from derl_bench.cli import main

    long = "*".join(["g4"] * (MAX_LENGTH // 3))
    assert len(long) <= MAX_LENGTH
    with pytest.raises(InputTooLongError, match=r"^input too long: its canonical form \(aliases "
                       r"written out, constants folded\) would be refused: 34122 characters; "
                       f"the limit is {MAX_LENGTH}$"):
        compile_reward(long, domain="agent")
    deep = "abs(" * MAX_DEPTH + "g4" + ")" * MAX_DEPTH
    with pytest.raises(TooDeepError, match="canonical form .* parentheses nest deeper than"):
        compile_reward(deep, domain="agent")
    assert main(["reward", "check", long, "--domain", "agent"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: input too long: its canonical")
    assert len(captured.err.splitlines()) == 1


def test_unary_chains_do_not_recurse():
    assert compile_reward("-" * 4001 + "g1", domain="math").canonical == "-outcome"


def test_unknown_domain():
    with pytest.raises(UnknownDomainError):
        compile_reward("g1", domain="chess")


def test_non_string_input():
    with pytest.raises(MetaRewardSyntaxError):
        compile_reward(b"g1", domain="math")  # type: ignore[arg-type]


def test_error_message_shows_a_caret():
    text = str(_error("g1 + sucess"))
    assert text.splitlines()[1].strip() == "g1 + sucess"
    assert text.splitlines()[2].index("^") == 2 + 5


def test_errors_are_value_errors():
    assert issubclass(MetaRewardError, ValueError)
