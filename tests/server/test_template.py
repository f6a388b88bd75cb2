"""pi-server runs the model's own chat template: a copy of SmolLM2 whose
tokenizer.chat_template is replaced (in place, by one of the same length, so the file's
layout is unchanged) with a template that refuses some conversations and reports what it
was given through raise_exception. A refusal is a 400 naming 'messages' with the
template's message; content-part arrays, chat_template_kwargs and strftime_now reach the
template; developer is read as system."""

import shutil

import pytest

from conftest import Server, model_path

TEMPLATE = (
    "{% if x is defined %}{{ raise_exception([x, messages[0].content is string, strftime_now"
    " is defined, messages[0].role, messages[0].content|length]|join(' ')) }}{% endif %}"
    "{% for m in messages %}{% if 'nope' in m.content %}"
    "{{ raise_exception('Not that') }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    import gguf
    src = model_path()
    f = gguf.GGUFReader(src).fields["tokenizer.chat_template"]
    old = bytes(f.parts[f.data[0]])
    new = TEMPLATE.encode()
    assert len(new) + 5 <= len(old), "the test template must fit in the original's bytes"
    new += b"{#" + b" " * (len(old) - len(new) - 4) + b"#}"
    copy = tmp_path_factory.mktemp("template") / "model.gguf"
    shutil.copyfile(src, copy)
    data = copy.read_bytes()
    assert data.count(old) == 1
    copy.write_bytes(data.replace(old, new))
    s = Server("-m", copy, "--parallel", 1, "-c", 256)
    yield s
    s.finish()


def chat(s, messages, **extra):
    return s.json("POST", "/v1/chat/completions",
                  dict({"messages": messages, "max_tokens": 2, "temperature": 0}, **extra))


def test_a_refusal_is_a_400_with_the_templates_message(srv):
    st, j = chat(srv, [{"role": "user", "content": "nope, not this"}])
    assert st == 400, j
    assert j["error"]["param"] == "messages", j
    assert "Not that" in j["error"]["message"], j
    st, j = chat(srv, [{"role": "user", "content": "a fine word"}])
    assert st == 200, j


def test_parts_kwargs_clock_and_roles_reach_the_template(srv):
    parts = [{"type": "text", "text": "Be"}, {"type": "text", "text": " brief"}]
    st, j = chat(srv, [{"role": "developer", "content": parts}, {"role": "user", "content": "hi"}],
                 chat_template_kwargs={"x": "p1"})
    assert st == 400, j
    # the parts array as sent (not a string, 2 parts), a clock, developer read as system
    assert "p1 False True system 2" in j["error"]["message"], j
