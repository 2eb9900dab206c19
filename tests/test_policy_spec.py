"""The policy-spec grammar ``name[:key=value,...]``: parsing, typing, errors, lists, help."""

from __future__ import annotations

import inspect

import pytest

from pagecast.errors import PagecastError
from pagecast.policies import available_prefetchers, get_prefetcher
from pagecast.policies.spec import (
    PolicySpec,
    format_policy_spec,
    parse_policy_spec,
    policy_defaults_help,
    policy_params,
    split_policy_list,
)


def test_every_registered_name_parses_bare():
    for name in available_prefetchers():
        assert parse_policy_spec(name) == PolicySpec(name, {})


def test_values_take_the_constructor_types():
    s = parse_policy_spec("stride:degree=8,min_conf=2")
    assert s.options == {"degree": 8, "min_conf": 2} and all(type(v) is int for v in s.options.values())
    s = parse_policy_spec("learned:model=m.pt,top_k=3,backend=numba")
    assert s.options == {"model": "m.pt", "top_k": 3, "backend": "numba"} and type(s.options["top_k"]) is int
    # a str option keeps digits as text; an Optional option takes none
    assert parse_policy_spec("pagesucc:train=123").options == {"train": "123"}
    assert parse_policy_spec("nextline:before=none").options == {"before": None}
    assert parse_policy_spec("nextline:before=0x10").options == {"before": 16}
    # blanks around names, keys and values do not matter
    assert parse_policy_spec(" stride : degree = 8 ").options == {"degree": 8}
    # a value may hold ':' and '=' (a path)
    assert parse_policy_spec("pagesucc:train=a:b=c.parquet").options == {"train": "a:b=c.parquet"}


def test_parsed_options_reach_the_prefetcher():
    pf = parse_policy_spec("stride:degree=7,min_conf=3").build()
    assert (pf.degree, pf.min_conf) == (7, 3)
    nl = parse_policy_spec("nextline:window=5").build()
    assert nl.window == 5


@pytest.mark.parametrize(
    "text",
    [
        "none",
        "stride:degree=8",
        "stride:degree=8,min_conf=2",
        "nextline:window=4,before=none",
        "pagesucc:train=run 1.parquet,degree=3",
        "learned:model=m.pt,top_k=2",
    ],
)
def test_round_trip(text):
    s = parse_policy_spec(text)
    assert str(s) == format_policy_spec(s.name, s.options)
    assert parse_policy_spec(str(s)) == s
    assert str(parse_policy_spec(str(s))) == str(s)


@pytest.mark.parametrize(
    "text, message",
    [
        ("bogus", "unknown prefetcher 'bogus' (valid: "),
        ("", "empty policy name"),
        (":degree=3", "empty policy name"),
        ("stride:foo=1", "stride has no option 'foo' (valid: degree, min_conf)"),
        ("none:degree=1", "none has no option 'degree' (valid: none)"),
        ("stride:degree", "'degree' is not key=value"),
        ("stride:=4", "'=4' is not key=value"),
        ("stride:degree=4,", "'' is not key=value"),
        ("stride:degree=eight", "degree='eight' is not an integer (degree: int, default 4)"),
        ("stride:degree=1.5", "is not an integer"),
        ("stride:degree=4,degree=5", "degree is given twice"),
        ("nextline:before=x", "before='x' is not an integer (before: int or none, default none)"),
        ("oracle:stream=x", "oracle has no option 'stream' (valid: k, lookahead)"),
    ],
)
def test_errors_are_one_line_and_name_what_is_valid(text, message):
    with pytest.raises(PagecastError) as e:
        parse_policy_spec(text)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_name_lists_every_registered_one():
    with pytest.raises(PagecastError) as e:
        parse_policy_spec("nosuch:k=1")
    assert str(e.value).endswith("(valid: " + ", ".join(available_prefetchers()) + ")")


def test_constructor_errors_become_one_line():
    with pytest.raises(PagecastError, match="needs a model file"):
        parse_policy_spec("learned").build()


def test_params_follow_the_signatures():
    for name in available_prefetchers():
        factory_sig = inspect.signature(type(get_prefetcher(name)).__init__) if name not in ("learned",) else None
        params = policy_params(name)
        if factory_sig is not None:
            for p in params.values():
                assert factory_sig.parameters[p.name].default == p.default
    assert {k: (p.type, p.default) for k, p in policy_params("stride").items()} == {
        "degree": (int, 4),
        "min_conf": (int, 1),
    }
    assert policy_params("learned")["model"].optional and policy_params("learned")["model"].type is str
    assert "stream" not in policy_params("oracle")  # not a scalar: only code can pass it


def test_bool_options():
    from pagecast.policies.spec import PolicyParam

    p = PolicyParam("on", bool, False)
    assert [p.convert(x) for x in ("true", "1", "yes", "off", "0", "False")] == [True, True, True, False, False, False]
    with pytest.raises(ValueError, match="not a boolean"):
        p.convert("maybe")
    assert PolicyParam("f", float, 1.0).convert("2.5") == 2.5
    with pytest.raises(ValueError, match="not a number"):
        PolicyParam("f", float, 1.0).convert("x")


@pytest.mark.parametrize(
    "texts, specs",
    [
        ("none,nextline,stride", ["none", "nextline", "stride"]),
        ("none,stride:degree=8,min_conf=2,nextline", ["none", "stride:degree=8,min_conf=2", "nextline"]),
        (["stride:degree=8,min_conf=2", "leap"], ["stride:degree=8,min_conf=2", "leap"]),
        (["a,b", "pagesucc:train=x:y.parquet,degree=2"], ["a", "b", "pagesucc:train=x:y.parquet,degree=2"]),
        ("none,,nextline,", ["none", "nextline"]),
        ("", []),
    ],
)
def test_split_policy_list(texts, specs):
    assert split_policy_list(texts) == specs


def test_defaults_help_lists_every_policy_with_its_defaults():
    text = policy_defaults_help()
    for name in available_prefetchers():
        assert name in text
    assert "stride: degree=4, min_conf=1" in text
    assert "nextline: window=32, before=none" in text
    assert policy_defaults_help(["none"]) == "none"


def test_pager_policies_take_options_through_the_same_parser():
    from pagecast.pager.runtime import PolicySpec as PagerPolicy

    p = PagerPolicy.parse("stride:degree=3,min_conf=2")
    assert (p.name, p.depth, p.min_conf) == ("stride", 3, 2)
    for text, message in [
        ("stride:foo=1", "stride has no option 'foo' (valid: degree, min_conf)"),
        ("nextline:window=x", "window='x' is not an integer"),
        ("sparse:foo=1", "sparse has no option 'foo' (valid: depth)"),
    ]:
        with pytest.raises(PagecastError, match=message.replace("(", r"\(").replace(")", r"\)")):
            PagerPolicy.parse(text)


# The settings the pager's own parser (before it used this module) gave every string it
# accepted: (name, depth, before, min_conf). nextline's before is window // 2.
OLD_PAGER_SETTINGS = {
    "none": ("none", 16, -1, 1),
    "nextline": ("nextline", 31, 16, 1),
    "nextline:8": ("nextline", 8, 4, 1),
    "nextline:1": ("nextline", 1, 1, 1),
    "nextline:64": ("nextline", 64, 32, 1),
    "nextline:window=9,before=4": ("nextline", 8, 4, 1),
    "nextline:before=0": ("nextline", 31, 0, 1),
    "next": ("nextline", 16, 0, 1),
    "next:5": ("nextline", 5, 0, 1),
    "next:1": ("nextline", 1, 0, 1),
    "stride": ("stride", 16, -1, 1),
    "stride:4": ("stride", 4, -1, 1),
    "stride:64": ("stride", 64, -1, 1),
    "stride:degree=3,min_conf=2": ("stride", 3, -1, 2),
    "stride:min_conf=0": ("stride", 16, -1, 0),
    "sparse": ("sparse", 16, -1, 1),
    "sparse:8": ("sparse", 8, -1, 1),
}


@pytest.mark.parametrize("text", sorted(OLD_PAGER_SETTINGS))
def test_the_pager_reads_every_old_spec_as_before(text):
    from pagecast.pager.runtime import PolicySpec as PagerPolicy
    from pagecast.policies.base import policy_entry

    p = PagerPolicy.parse(text)
    assert (p.name, p.depth, p.before, p.min_conf) == OLD_PAGER_SETTINGS[text]
    assert p.table is None and p.policy_id == policy_entry(p.name).native_id
    assert bool(p.warning) == text.startswith("next:") or text == "next"


def test_the_pager_table_spec_and_the_batch_argument(tmp_path):
    from pagecast.pager.runtime import PolicySpec as PagerPolicy

    tab = tmp_path / "a,b=c.tab"  # a file name with ',' and '=' is still the whole value
    tab.write_bytes(b"")
    p = PagerPolicy.parse(f"table:{tab}")
    assert (p.name, p.table, p.depth) == ("table", tab, 16)
    plain = tmp_path / "t.tab"
    plain.write_bytes(b"")
    assert PagerPolicy.parse(f"table:file={plain},depth=4") == PagerPolicy("table", 4, plain)
    # depth=: the pages per batch of a spec that names none, as before
    for text, want in [("sparse", 4), ("nextline", 4), ("stride", 4), ("next", 4), (f"table:{tab}", 4)]:
        assert PagerPolicy.parse(text, depth=4).depth == want, text
    assert PagerPolicy.parse("next", depth=4).before == 0
    assert PagerPolicy.parse("nextline:window=9", depth=4).depth == 8  # the text wins


def test_the_deprecated_alias_is_one_line_and_the_syntax_comes_from_the_registry():
    from pagecast.pager.runtime import PolicySpec as PagerPolicy
    from pagecast.policies.spec import policy_syntax

    w = PagerPolicy.parse("next:3").warning
    assert "\n" not in w and "'next' is deprecated" in w and "nextline" in w
    assert policy_syntax("pager") == "nextline[:N], none, sparse[:N], stride[:N], table:FILE; deprecated: next[:N]"
    # the shorthand is the spec grammar's, not the pager's alone
    assert parse_policy_spec("stride:8").options == {"degree": 8}
    assert parse_policy_spec("nextline:8,before=0").options == {"window": 9, "before": 0}
    assert parse_policy_spec("stride", backend="pager").options == {"degree": 16}
    assert parse_policy_spec("stride").options == {}


@pytest.mark.parametrize(
    "text, message",
    [
        ("nosuch", "unknown pager policy 'nosuch' (valid: nextline[:N], none, sparse[:N], stride[:N], table:FILE"),
        ("leap:4", "policy 'leap' does not run in the pager; it runs in: Python path, simulator's compiled loop"),
        ("stride:x", "'x' is not key=value, and as stride:N (the degree) it is not an integer (valid keys: degree, "),
        ("stride:0", "policy 'stride:0': stride degree must be 1..64"),
        ("sparse:0", "policy 'sparse:0': depth must be a positive integer"),
        ("sparse:depth=x", "depth='x' is not an integer (depth: int, default 16)"),
        ("nextline:8,window=3", "window is given twice"),
        ("table", "policy 'table': needs a file: table:FILE"),
        ("table:/nonexistent/t.tab", "no such pager table file"),
        ("none:5", "'5' is not key=value (use none:key=value,...; keys: none)"),
        ("stride:degree=4,8", "'8' is not key=value (use stride:key=value,...; keys: degree, min_conf)"),
    ],
)
def test_bad_pager_specs_are_one_line(text, message):
    from pagecast.pager.runtime import PolicySpec as PagerPolicy

    with pytest.raises(PagecastError) as e:
        PagerPolicy.parse(text)
    assert message in str(e.value) and "\n" not in str(e.value)
