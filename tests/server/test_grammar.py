"""Constrained decoding through the official `openai` client: response_format json_schema
(the answer parses and validates against the schema with the `jsonschema` package,
streamed and not, on chat and completions, for every seed tried, n > 1), a GBNF `grammar`
(the answer is in the grammar's language, checked by a regular expression written
independently), and bad schemas and grammars answered 400 with a message naming what is
wrong."""

import json
import re

import pytest

from conftest import API_KEY, import_or_skip

openai = import_or_skip("openai", "pip install openai (tools/setup.sh does)")
jsonschema = import_or_skip("jsonschema", "pip install jsonschema (tools/setup.sh does)")

CAT = {"type": "object",
       "properties": {"name": {"type": "string", "maxLength": 20},
                      "age": {"type": "integer"},
                      "color": {"enum": ["black", "white", "orange", "grey"]}},
       "required": ["name", "age", "color"], "additionalProperties": False}
NESTED = {"type": "object",
          "properties": {"title": {"type": "string", "maxLength": 30},
                         "author": {"type": "object",
                                    "properties": {"first": {"type": "string", "maxLength": 15},
                                                   "born": {"type": ["integer", "null"]}},
                                    "required": ["first", "born"],
                                    "additionalProperties": False},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                  "minItems": 1, "maxItems": 3},
                         "rating": {"type": "number"}},
          "required": ["title", "author", "tags"], "additionalProperties": False}
LIST = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 5}
TREE = {"$defs": {"node": {"type": "object",
                           "properties": {"v": {"type": "integer"},
                                          "kids": {"type": "array", "maxItems": 2,
                                                   "items": {"$ref": "#/$defs/node"}}},
                           "required": ["v", "kids"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}
SCHEMAS = {"cat": CAT, "nested": NESTED, "list": LIST, "tree": TREE}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=300)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def fmt(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def check(text, schema, finish):
    """A finished answer is one valid instance; one cut by max_tokens must not be."""
    if finish == "stop":
        jsonschema.validate(json.loads(text), schema)
    else:
        assert finish == "length", finish


# What each schema's chat is asked. Asked freely for the recursive tree, SmolLM2 at
# temperature 1.2 rarely closes it (1 of 8 seeds within 600 tokens, measured before and
# after the packed gemm changed its rounding), so it is shown a small one to reproduce.
ASK_FOR = {"tree": 'Reply with this JSON and nothing else: {"v": 1, "kids": [{"v": 2, "kids": []}]}'}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_chat(client, model, name):
    schema = SCHEMAS[name]
    n_stop = 0
    ask = ASK_FOR.get(name, "Tell me about the sea.")
    for seed in range(4):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": ask}],
            response_format=fmt(name, schema), temperature=1.2, seed=seed, max_tokens=200)
        c = r.choices[0]
        check(c.message.content, schema, c.finish_reason)
        n_stop += c.finish_reason == "stop"
    assert n_stop >= 1, "at least one answer should end on its own"


def test_json_schema_stream_equals_non_stream(client, model):
    kw = dict(model=model, messages=[{"role": "user", "content": "Describe a cat."}],
              response_format=fmt("cat", CAT), temperature=0, max_tokens=120)
    whole = client.chat.completions.create(**kw)
    text = "".join(ch.choices[0].delta.content or ""
                   for ch in client.chat.completions.create(stream=True, **kw) if ch.choices)
    assert text == whole.choices[0].message.content
    assert whole.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), CAT)


def test_json_schema_n_choices(client, model):
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Describe a book."}],
        response_format=fmt("nested", NESTED), temperature=1.0, n=3, seed=7, max_tokens=200)
    assert len(r.choices) == 3
    for c in r.choices:  # each choice has its own grammar state
        check(c.message.content, NESTED, c.finish_reason)


def test_json_schema_parse_helper(client, model):
    # the client's structured-output helper: it sends a strict json_schema and parses
    pydantic = import_or_skip("pydantic", "the openai client depends on it")

    class Pet(pydantic.BaseModel):
        name: str
        legs: int
        cute: bool

    r = client.beta.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "A pet, please."}],
        response_format=Pet, temperature=0, max_tokens=100)
    assert r.choices[0].finish_reason == "stop"
    pet = r.choices[0].message.parsed
    assert isinstance(pet, Pet)


def test_json_schema_completions(server):
    for seed in range(3):
        st, j = server.json("POST", "/v1/completions",
                            {"prompt": "A list of numbers:", "max_tokens": 60, "seed": seed,
                             "temperature": 1.0, "response_format": fmt("list", LIST)})
        assert st == 200, j
        check(j["choices"][0]["text"], LIST, j["choices"][0]["finish_reason"])


GRAMMARS = [
    ('root ::= ("yes" | "no")', r"(yes|no)"),
    ('root ::= [A-Z] [a-z]{2,6} " " [0-9]{1,3} "!"', r"[A-Z][a-z]{2,6} [0-9]{1,3}!"),
    ('root ::= item ("," item){0,3}\nitem ::= "(" [a-c]+ ")"',
     r"\([a-c]+\)(,\([a-c]+\)){0,3}"),
]


@pytest.mark.parametrize("gbnf,pattern", GRAMMARS)
def test_grammar(server, client, model, gbnf, pattern):
    for seed in range(4):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Is the sky blue?"}],
            temperature=1.0, seed=seed, max_tokens=40, extra_body={"grammar": gbnf})
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        assert re.fullmatch(pattern, c.message.content), c.message.content
    # streamed, on completions
    text = ""
    for ch in client.completions.create(model=model, prompt="Answer:", max_tokens=40,
                                        temperature=0, stream=True,
                                        extra_body={"grammar": gbnf}):
        text += ch.choices[0].text if ch.choices else ""
    assert re.fullmatch(pattern, text), text


@pytest.mark.parametrize("body,words", [
    ({"response_format": fmt("x", {"type": "string", "pattern": "^a+$"})},
     ["keyword 'pattern' is not supported"]),
    ({"response_format": fmt("x", {"type": "object",
                                   "properties": {"n": {"type": "integer", "minimum": 1}}})},
     ["'minimum'", "#/properties/n"]),
    ({"response_format": fmt("x", {"$ref": "#/$defs/nope"})}, ["names no definition"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, ["'schema'"]),
    ({"grammar": "root ::= \"a\" | b"}, ["grammar", "1:16", "undefined rule 'b'"]),
    ({"grammar": "root ::= root \"x\""}, ["left recursion"]),
    ({"grammar": 5}, ["'grammar' must be a string"]),
    ({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}},
     ["cannot be combined"]),
])
def test_bad_schema_or_grammar(client, model, body, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       max_tokens=4, extra_body=body)
    msg = e.value.body["message"] if isinstance(e.value.body, dict) else str(e.value)
    for w in words:
        assert w in msg, msg
