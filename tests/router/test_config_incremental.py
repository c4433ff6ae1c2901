"""A large YAML is parsed item by item and an edit is applied in proportion
(issue 13): the parse of a changed file equals a whole-file parse, and after
any sequence of edits the `config` rows equal what the file says.

Real PyYAML, pydantic and DB (no part of the parser or the sync is faked);
Hypothesis draws the files and the edits.
"""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from router import config_schema
from router.config_schema import ConfigError, _parse_whole, parse, parse_tracked
from router.models import Backend, Source
from router.services import _backend_fields, config_sync

ENV = "ROUTER_TEST_CHUNK_KEY"
TEMPLATE = "${" + ENV + "}"

# One backend as a YAML list item, in the forms operators write.
names = st.text("abcdefgh0123", min_size=1, max_size=6)
models = st.lists(st.sampled_from(["m0", "m1", "m2", "chat"]), min_size=1, max_size=2, unique=True)


@st.composite
def item(draw, indent: int) -> str:
    name = draw(names)
    ms = draw(models)
    weight = draw(st.integers(1, 1000))
    pad = " " * indent
    form = draw(st.sampled_from(["flow", "block", "block-key", "bad-weight", "unknown-key", "dash-alone"]))
    if form == "flow":
        return f"{pad}- {{name: {name}, url: 'http://h:{weight}', models: [{', '.join(ms)}], weight: {weight}}}\n"
    if form == "block-key":  # an api_key template: its memo key includes the variable's value
        return f"{pad}- name: {name}\n{pad}  url: http://h:1\n{pad}  models: [{ms[0]}]\n{pad}  api_key: ${{{ENV}}}\n"
    if form == "bad-weight":
        return f"{pad}- {{name: {name}, url: 'http://h:1', models: [m0], weight: 0}}\n"
    if form == "unknown-key":
        return f"{pad}- {{name: {name}, url: 'http://h:1', models: [m0], wieght: 3}}\n"
    if form == "dash-alone":
        return f"{pad}-\n{pad}  name: {name}\n{pad}  url: http://h:2\n{pad}  models: [{ms[0]}]\n"
    comment = draw(st.sampled_from(["", f"{pad}  # note\n", "\n"]))
    return (
        f"{pad}- name: {name}\n{pad}  url: http://h:{weight}\n{pad}  models:\n"
        + "".join(f"{pad}    - {m}\n" for m in ms)
        + comment
    )


@st.composite
def yaml_file(draw) -> str:
    indent = draw(st.sampled_from([0, 2, 4]))
    items = draw(st.lists(item(indent), min_size=1, max_size=12))
    head = draw(st.sampled_from(["", "# fleet\n", "selection_strategy: least_in_flight\n"]))
    tail = draw(st.sampled_from(["", "api_keys:\n  mode: blocking\n", "health:\n  enabled: false\n# end\n"]))
    odd = draw(st.sampled_from(["", "", "", "anchor", "second-doc", "tab"]))
    text = head + "backends:\n" + draw(st.sampled_from(["", "  # the fleet\n"])) + "".join(items) + tail
    if odd == "anchor":
        text = text.replace("url: http://h:", "url: &u http://h:", 1)
    elif odd == "second-doc":
        text += "---\nbackends: []\n"
    elif odd == "tab":
        text = text.replace("  url", "\turl", 1)
    return text


def outcome(fn, text: str):
    try:
        model, raw = fn(text)
    except ConfigError as exc:
        return "error", str(exc)
    return model.model_dump(), raw


@pytest.fixture
def small_files(monkeypatch):
    """Split even a few items (the split starts at 64 in production)."""
    monkeypatch.setattr(config_schema._BackendChunks, "MIN_ITEMS", 1)
    monkeypatch.setenv(ENV, "k1")
    config_schema._CHUNKS._memo = {}
    config_schema._CHUNKS._last = None
    yield
    config_schema._CHUNKS._memo = {}
    config_schema._CHUNKS._last = None


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=yaml_file(), second=yaml_file(), env=st.sampled_from(["k1", "k2"]))
def test_the_item_by_item_parse_equals_the_whole_file_parse(small_files, first, second, env):
    assert outcome(lambda t: parse(t, remember=True), first) == outcome(lambda t: _parse_whole(t, "<config>"), first)
    # The second file is parsed with the first one's items remembered (and
    # maybe another value of the variable a remembered item names).
    os.environ[ENV] = env
    assert outcome(lambda t: parse(t, remember=True), second) == outcome(lambda t: _parse_whole(t, "<config>"), second)


# Small edits anywhere in the text, structural ones included: the parse that
# starts from the last one (only the items the edit touches are cut again)
# equals the whole-file parse after every edit.
structural = st.sampled_from([
    "\n", " ", "-", "- ", "\n  - ", "\n- ", "\n    - ", "#", ":", "{", "}", ",", "'", "&a ", "*a", "!t ", "\r",
    TEMPLATE, "\nbackends:\n", "\n---\n", "\nhealth:\n", "\n  enabled: true\n",
])
benign = st.sampled_from([  # what operators do: values, names, whole items (mostly kept valid)
    "", "x", "1", "7", "  - {name: z, url: 'http://h:9', models: [m0]}\n", "- {name: y, url: 'http://h:8', models: [m1]}\n",
    "    - {name: w, url: 'http://h:7', models: [m2]}\n",
])
snippets = st.one_of(benign, benign, structural)


@st.composite
def valid_file(draw) -> str:
    """A good file in the plain block form (what the edit-sized path starts from)."""
    indent = draw(st.sampled_from([0, 2, 4]))
    pad = " " * indent
    forms = draw(st.lists(st.sampled_from(["flow", "block", "dash-alone"]), min_size=1, max_size=12))
    items = []
    for i, form in enumerate(forms):
        if form == "flow":
            items.append(f"{pad}- {{name: b{i}, url: 'http://h:{i}', models: [m0], weight: {i + 1}}}\n")
        elif form == "block":
            items.append(f"{pad}- name: b{i}\n{pad}  url: http://h:{i}\n{pad}  models:\n{pad}    - m1\n")
        else:
            items.append(f"{pad}-\n{pad}  name: b{i}\n{pad}  url: http://h:2\n{pad}  models: [m2]\n")
    head = draw(st.sampled_from(["", "# fleet\n", "selection_strategy: least_in_flight\n"]))
    tail = draw(st.sampled_from(["", "api_keys:\n  mode: blocking\n", "health:\n  enabled: false\n# end\n"]))
    return head + "backends:\n" + "".join(items) + tail


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.one_of(valid_file(), valid_file(), yaml_file()), plain=st.sampled_from([True, True, True, False]),
       edits=st.lists(st.tuples(st.floats(0, 1), st.sampled_from([0, 0, 0, 1, 2, 6]), snippets),
                                min_size=1, max_size=25))
def test_after_small_edits_the_parse_from_the_last_one_equals_the_whole_file_parse(small_files, first, plain, edits):
    text = first.replace(TEMPLATE, "k9") if plain else first  # no ${VAR}: the edit-sized path
    for where, cut, snippet in [(0.0, 0, ""), *edits]:
        at = round(where * len(text))
        text = text[:at] + snippet + text[at + cut :]
        got = outcome(lambda t: parse(t, remember=True), text)
        assert got == outcome(lambda t: _parse_whole(t, "<config>"), text), repr(text)


def test_an_edit_of_one_item_cuts_only_that_item_and_says_what_changed(monkeypatch):
    monkeypatch.setattr(config_schema._CHUNKS, "_memo", {})
    monkeypatch.setattr(config_schema._CHUNKS, "_last", None)
    lines = ["backends:"] + [f"  - {{name: b{i}, url: 'http://h:{i + 1}', models: [m]}}" for i in range(100)]
    text = "\n".join([*lines, "health:", "  enabled: false", ""])
    first = parse_tracked(text, remember=True)[2]
    assert first is not None and first.base is None and len(first.added) == 100
    cuts = []
    whole = config_schema._BackendChunks._cut
    monkeypatch.setattr(config_schema._BackendChunks, "_cut", lambda self, t: cuts.append(t) or whole(self, t))
    edits = [
        (text.replace("name: b49,", "name: renamed,"), {"b49"}, {"renamed"}),  # a rename in place
        (text.replace("  - {name: b7,", "  - {name: n1, url: 'http://h:1', models: [m]}\n  - {name: b7,"), set(), {"n1"}),
        (text.replace("  - {name: b99, url: 'http://h:100', models: [m]}\n", ""), {"b99"}, set()),  # the last item
    ]
    base = first.gen
    for edited, gone, added in edits:
        model, _, tracked = parse_tracked(edited, remember=True)
        assert tracked is not None and tracked.base == base and not cuts  # from the last parse, nothing cut whole
        assert model.model_dump() == _parse_whole(edited, "<config>")[0].model_dump()
        # The items the edit touched (and at most a neighbour the cut took along, unchanged).
        names = {model.backends[i].name for i in tracked.added}
        assert (set(tracked.gone) - names, names - set(tracked.gone)) == (gone, added)
        assert len(tracked.gone) <= 2 and len(tracked.added) <= 2
        base = tracked.gen
        parse_tracked(text, remember=True)  # back to the first file
        base = config_schema._CHUNKS._last.gen


def test_a_plain_large_file_is_split_and_an_edit_reparses_only_its_item(monkeypatch):
    monkeypatch.setattr(config_schema._CHUNKS, "_memo", {})
    lines = ["backends:"] + [f"  - {{name: b{i}, url: 'http://h:{i + 1}', models: [m]}}" for i in range(100)]
    text = "\n".join([*lines, "health:", "  enabled: false", ""])
    assert config_schema._CHUNKS.split(text) is not None
    first, _ = parse(text, remember=True)
    edited, _ = parse(text.replace("http://h:50'", "http://h:5000'"), remember=True)
    same = [a is b for a, b in zip(first.backends, edited.backends, strict=True)]
    assert same.count(False) == 1 and not same[49]  # only the edited item is a new object
    assert edited.backends[49].url == "http://h:5000"
    # Without remember (a web process at start, a system check) nothing is kept.
    before = dict(config_schema._CHUNKS._memo)
    parse(text.replace("http://h:7'", "http://h:7000'"), remember=False)
    assert config_schema._CHUNKS._memo == before


# ---- the sync: the rows after a sequence of edits ----


FIELDS = ("url", "kind", "models", "served_model", "weight", "capacity", "priority", "api_key", "extra")


def rows() -> dict[str, dict]:
    return {
        r["name"]: {k: v for k, v in r.items() if k != "name"}
        for r in Backend.objects.filter(source=Source.CONFIG).values("name", *FIELDS)
    }


def expected(text: str) -> dict[str, dict]:
    model, raw = _parse_whole(text, "<config>")
    out = {}
    for rb, b in zip(raw.get("backends") or [], model.backends, strict=True):
        fields = _backend_fields(rb, b)
        out[b.name] = {k: fields[k] for k in FIELDS}
    return out


edit = st.tuples(
    st.sampled_from(["add", "remove", "weight", "rename", "comment", "env", "bad", "swap"]),
    st.integers(0, 10_000),
)


def render(fleet: dict[str, int], templated: bool = True) -> str:
    key = f"${{{ENV}}}" if templated else "k1"
    lines = ["backends:" if fleet else "backends: []"]
    for name, weight in fleet.items():
        lines.append(f"  - {{name: {name}, url: 'http://h:1', models: [m], weight: {weight}, api_key: '{key}'}}")
    return "\n".join([*lines, "health:", "  enabled: false", ""])


@pytest.mark.django_db(transaction=True)
@hsettings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(edit, min_size=20, max_size=40), templated=st.booleans())
def test_after_every_edit_the_config_rows_equal_the_file(small_files, tmp_path, settings, edits, templated):
    settings.ROUTER_REDIS_PREFIX = f"t{uuid.uuid4().hex[:10]}:"
    path = tmp_path / f"{uuid.uuid4().hex}.yaml"
    fleet = {f"b{i}": 100 for i in range(8)}
    path.write_text(render(fleet, templated))
    config_sync(path, incremental=True)
    good = path.read_text()
    for kind, n in edits:
        if kind == "add":
            fleet[f"n{n}"] = 1 + n % 1000
        elif kind == "remove" and fleet:
            fleet.pop(sorted(fleet)[n % len(fleet)])
        elif kind == "weight" and fleet:
            fleet[sorted(fleet)[n % len(fleet)]] = 1 + n % 1000
        elif kind == "rename" and fleet:
            old = sorted(fleet)[n % len(fleet)]
            fleet[f"r{n}"] = fleet.pop(old)
        elif kind == "env":
            os.environ[ENV] = f"k{n % 3}"
        elif kind == "swap" and len(fleet) > 1:
            items = list(fleet.items())
            items.reverse()
            fleet = dict(items)
        text = render(fleet, templated)
        if kind == "comment":
            text = text.replace("health:", f"# edit {n}\nhealth:")
        if kind == "bad":
            text = text.replace("weight: ", "wieght: ", 1) if fleet else text + "oops: 1\n"
        path.write_text(text)
        try:
            config_sync(path, incremental=True)
        except ConfigError:
            assert kind == "bad"
        else:
            good = text
        assert rows() == expected(good), f"after {kind} {n}"
    # The env edit changed the resolved key, never the stored template.
    assert all(r["api_key"] == (f"${{{ENV}}}" if templated else "k1") for r in rows().values())


@pytest.mark.django_db
def test_an_edit_after_another_process_applied_the_file_reads_only_its_rows(small_files, tmp_path, settings):
    from django.db import connection

    settings.ROUTER_REDIS_PREFIX = f"t{uuid.uuid4().hex[:10]}:"
    path = tmp_path / f"{uuid.uuid4().hex}.yaml"
    fleet = {f"b{i}": 100 for i in range(30)}
    path.write_text(render(fleet))
    config_sync(path)  # a web process at start: applies it, remembers nothing
    assert config_sync(path, incremental=True) is False  # the tasks process at start: primes
    fleet["b7"] = 7
    path.write_text(render(fleet))
    reads: list[str] = []

    def record(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("SELECT") and '"router_backend"' in sql:
            reads.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert config_sync(path, incremental=True) is True
    assert reads and all(" IN (" in sql for sql in reads), reads  # never all 30 rows
    assert rows() == expected(render(fleet))


def test_an_item_moved_to_another_indentation_is_parsed_again(small_files):
    """Found by the property test above: the text after an item's dash is
    the same at two indentations, valid at one and not at the other; the
    items parsed at the first are not taken for the second."""
    first = "backends:\n  - name: b0\n    url: http://h:0\n    models:\n      - m1\nhealth:\n  enabled: false\n# end\n"
    parse(first, remember=True)
    moved = first[:11] + "- {name: y, url: 'http://h:8', models: [m1]}\n" + first[11:]
    assert moved.startswith("backends:\n - {name: y") and "\n - name: b0\n    url" in moved
    assert outcome(lambda t: parse(t, remember=True), moved) == outcome(lambda t: _parse_whole(t, "<config>"), moved)
    assert outcome(lambda t: parse(t, remember=True), moved)[0] == "error"
