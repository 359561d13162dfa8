#!/usr/bin/env python3
"""Renders every chat template in <testdata>/chat-templates/*.jinja with Python jinja2, set up
exactly as HF transformers sets it up (its own compile function: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, the `generation` tag, raise_exception, its tojson and
strftime_now), over a fixed set of conversations, and writes the cases and expected outputs to a
JSON file that tests/tokenizer/chat_template_reference_test.cc compares kiln's renders against.

Usage: render_templates.py <testdata_dir> <out.json>

strftime_now is pinned to 2024-07-26 12:34:56 so outputs do not depend on the day they are made.
"""
import datetime
import glob
import json
import os
import sys

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 34, 56)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

TOOL_CALL = {
    "id": "call_0001",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
}


def cases():
    sys_user = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! Who are you?"},
    ]
    multi = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 equals 4."},
        {"role": "user", "content": "And 3+3? Answer with \"quotes\" and ünïcödé."},
    ]
    prefill = [
        {"role": "user", "content": "Write a haiku about rivers."},
        {"role": "assistant", "content": "Water finds its way"},
    ]
    tool_conv = [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather",
         "content": "{\"temperature\": 21, \"condition\": \"sunny\"}"},
    ]
    out = []
    for gen in (True, False):
        suffix = "gen" if gen else "nogen"
        out.append((f"system_user_{suffix}", {"messages": sys_user, "add_generation_prompt": gen}))
        out.append((f"multi_turn_{suffix}", {"messages": multi, "add_generation_prompt": gen}))
        out.append((f"tools_{suffix}",
                    {"messages": tool_conv, "tools": TOOLS, "add_generation_prompt": gen}))
    out.append(("user_only_gen", {"messages": sys_user[1:], "add_generation_prompt": True}))
    # Beyond the basic set: shapes real servers send.
    reasoning = [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "Yes, 17 is prime.",
         "reasoning_content": "17 has no divisors besides 1 and itself."},
        {"role": "user", "content": "And 21?"},
    ]
    out.append(("reasoning_gen", {"messages": reasoning, "add_generation_prompt": True}))
    parts = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                     {"type": "text", "text": "the sea."}]},
    ]
    out.append(("content_parts_gen", {"messages": parts, "add_generation_prompt": True}))
    string_args = [dict(m) for m in tool_conv]
    string_args[2] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0001", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_0002", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Lyon"}}}]}
    string_args.append({"role": "tool", "tool_call_id": "call_0002", "name": "get_weather",
                        "content": "rain"})
    out.append(("two_tool_calls_gen",
                {"messages": string_args, "tools": TOOLS, "add_generation_prompt": True}))
    out.append(("thinking_off_gen", {"messages": multi, "add_generation_prompt": True,
                                     "enable_thinking": False}))
    out.append(("prefill_nogen", {"messages": prefill, "add_generation_prompt": False}))
    for name, ctx in out:
        ctx.setdefault("tools", None)
        ctx.setdefault("documents", None)
        ctx["bos_token"] = "<s>"
        ctx["eos_token"] = "</s>"
    return out


DEFAULT_MODEL_TEMPLATE = "default-model"


def main():
    testdata, out_path = sys.argv[1], sys.argv[2]
    results = []
    templates = [(os.path.basename(p)[:-len(".jinja")], p, False)
                 for p in sorted(glob.glob(os.path.join(testdata, "chat-templates", "*.jinja")))]
    # The default model's own template, from its GGUF metadata (KILN_DEFAULT_MODEL, set by
    # scripts/test), written beside the output so the C++ test renders the very same text.
    model = os.environ.get("KILN_DEFAULT_MODEL")
    if model and os.path.exists(model):
        import gguf
        field = gguf.GGUFReader(model).fields["tokenizer.chat_template"]
        path = os.path.join(os.path.dirname(os.path.abspath(out_path)), "default-model.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(field.contents())
        templates.append((DEFAULT_MODEL_TEMPLATE, path, True))
    for name, path, explicit_path in templates:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        try:
            template = _compile_jinja_template(source)
            template.environment.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
        except Exception as e:  # the whole template fails to parse
            template, parse_error = None, f"{type(e).__name__}: {e}"
        for case_name, ctx in cases():
            entry = {"template": name, "case": case_name, "context": ctx}
            if explicit_path:
                entry["template_path"] = path
            if template is None:
                entry["error"] = parse_error
            else:
                try:
                    entry["expected"] = template.render(**ctx)
                except Exception as e:
                    entry["error"] = f"{type(e).__name__}: {e}"
            results.append(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"fixed_now": FIXED_NOW.isoformat(), "cases": results}, f, ensure_ascii=False,
                  indent=1)
    num_errors = sum("error" in r for r in results)
    print(f"wrote {len(results)} cases ({num_errors} raise in jinja2) to {out_path}")


if __name__ == "__main__":
    main()
