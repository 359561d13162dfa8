#!/usr/bin/env python3
"""Differential cases for kiln's Jinja engine: random expressions (operators, filters, tests,
methods, slices) and random statement nests (for/if/set/namespace/macro/break/continue, block
set, comments, every whitespace-control marker), rendered with Python jinja2 set up exactly as
HF transformers does (its own _compile_jinja_template). Writes [{src, ctx, expected | error}] to
JSON for tests/tokenizer/jinja_differential_test.cc. Fixed seeds: the same cases every run.

Usage: jinja_differential.py <out.json> [num_expression_cases] [num_statement_cases]
"""
import copy
import json
import random
import sys

from transformers.utils.chat_template_utils import _compile_jinja_template

CTX = {"x": 7, "s": "ab ba", "l": [3, 2, 1, 2], "d": {"k": "v", "a": [1, {"b": None}]}, "n": None,
       "f": 1.5, "ml": [{"k": 1}, {"k": 0}, {"j": 2}],
       "messages": [{"role": "user", "content": "hi"}]}

ATOMS = ["1", "2", "0", "-3", "2.5", "0.1", "1e20", "'ab'", "'A b'", "''", "'é'", "true", "false",
         "none", "[1, 2]", "[]", "{'k': 1}", "{}", "(1, 'x')", "x", "s", "l", "d", "u", "d.k",
         "d['k']", "l[0]", "l[-1]", "s[1:]", "s[::-1]", "l[1:5]", "n", "f", "ml"]
BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or",
          "**"]
FILTERS = ["length", "string", "tojson", "trim", "upper", "lower", "list", "first", "last",
           "default('D')", "default('D', true)", "join(',')", "sort", "unique | list",
           "items | list", "int", "float", "abs", "round", "sum", "min", "max", "title",
           "capitalize", "tojson(indent=2)", "reverse | list", "wordcount", "indent(2)",
           "replace('a', 'z')", "select | list", "reject | list", "map('string') | list",
           "selectattr('k') | list", "dictsort", "count", "safe", "e", "batch(2) | list"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
         "iterable", "sequence", "true", "false", "boolean", "odd", "even", "divisibleby 2",
         "equalto 1", "lower", "upper", "in [1, 2]", "callable"]
METHODS = ["s.upper()", "s.split()", "s.split('b')", "s.startswith('a')", "s.endswith(('b', 'c'))",
           "s.replace('a', 'q')", "s.find('b')", "s.count('a')", "s.strip('a')",
           "d.items() | list", "d.keys() | list", "d.get('k')", "d.get('z', 5)", "l.index(2)",
           "'-'.join(['a', 'b'])", "s.title()", "s.lstrip()", "s.rstrip('b')", "s.split(' ', 1)",
           "s.rsplit('a')", "s.rsplit('b', 1)", "s.splitlines()"]


def expression(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice(ATOMS)
    if r < 0.5:
        return f"({expression(rng, depth + 1)} {rng.choice(BINOPS)} {expression(rng, depth + 1)})"
    if r < 0.65:
        return f"({expression(rng, depth + 1)} | {rng.choice(FILTERS)})"
    if r < 0.75:
        neg = rng.choice(["", "not "])
        return f"({expression(rng, depth + 1)} is {neg}{rng.choice(TESTS)})"
    if r < 0.85:
        return rng.choice(METHODS)
    if r < 0.9:
        return f"(not {expression(rng, depth + 1)})"
    return (f"({expression(rng, depth + 1)} if {expression(rng, depth + 1)} "
            f"else {expression(rng, depth + 1)})")


STMT_EXPRS = ["x", "s", "l", "d.k", "loop.index", "loop.first", "loop.last", "loop.length",
              "loop.revindex", "loop.previtem", "loop.nextitem", "i", "k", "v", "ns.a", "y",
              "m(1)", "m('q', b=2)", "l | length", "i * 2", "i ~ '-'", "d | tojson",
              "l[loop.index0]", "messages[0].role", "n", "(i is odd)", "l[1:]",
              "range(3) | list"]
CONDS = ["i > 1", "loop.first", "loop.last", "not loop.last", "x is defined", "y is defined",
         "i is even", "k == 'k'", "ns.a > 2", "true", "false", "n is none"]
TEXTS = ["", " ", "\n", "  \n", "\n  ", "a", " b ", "\n\n", "\t", "x\n  "]


def tag(rng, body):
    return "{%" + rng.choice(["", "-", "+"]) + " " + body + " " + rng.choice(["", "-"]) + "%}"


def block(rng, depth=0):
    parts = []
    for _ in range(rng.randint(1, 2)):
        r = rng.random()
        if depth < 2 and r < 0.2:
            source = rng.choice(["l", "range(3)", "[]", "s", "d"])
            parts.append(tag(rng, f"for i in {source}" + rng.choice(["", " if i != 2"])) +
                         block(rng, depth + 1) +
                         (tag(rng, "else") + block(rng, depth + 1) if rng.random() < 0.2 else "") +
                         tag(rng, "endfor"))
        elif depth < 3 and r < 0.3:
            parts.append(tag(rng, "for k, v in d.items()") + block(rng, depth + 1) +
                         tag(rng, "endfor"))
        elif depth < 3 and r < 0.45:
            parts.append(tag(rng, f"if {rng.choice(CONDS)}") + block(rng, depth + 1) +
                         (tag(rng, f"elif {rng.choice(CONDS)}") + block(rng, depth + 1)
                          if rng.random() < 0.3 else "") +
                         (tag(rng, "else") + block(rng, depth + 1) if rng.random() < 0.4 else "") +
                         tag(rng, "endif"))
        elif r < 0.55:
            parts.append(tag(rng, f"set y = {rng.choice(STMT_EXPRS)}"))
        elif r < 0.6:
            parts.append(tag(rng, "set ns.a = ns.a + 1"))
        elif r < 0.65 and depth > 0:
            parts.append(tag(rng, rng.choice(["break", "continue"])))
        elif r < 0.7:
            parts.append("{#" + rng.choice(["", "-"]) + " c " + rng.choice(["", "-"]) + "#}")
        elif r < 0.75 and depth < 3:
            parts.append(tag(rng, "set z") + block(rng, depth + 1) + tag(rng, "endset") + "[{{ z }}]")
        elif r < 0.85:
            parts.append("{{" + rng.choice(["", "-"]) + " " + rng.choice(STMT_EXPRS) + " " +
                         rng.choice(["", "-"]) + "}}")
        else:
            parts.append(rng.choice(TEXTS))
        parts.append(rng.choice(TEXTS))
    return "".join(parts)


PRELUDE = ("{% set ns = namespace(a=0) %}{% macro m(a, b=5) %}<{{ a }}{{ b }}{{ x }}>"
           "{% endmacro %}")


def main():
    out_path = sys.argv[1]
    num_expr = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    num_stmt = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    rng = random.Random(20261122)
    sources = ["{{ " + expression(rng) + " }}" for _ in range(num_expr)]
    sources += [PRELUDE + block(rng) for _ in range(num_stmt)]
    cases = []
    for src in sources:
        case = {"src": src, "ctx": CTX}
        try:
            case["expected"] = _compile_jinja_template(src).render(**copy.deepcopy(CTX))
        except Exception as e:  # jinja2 raised: kiln must fail too
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
    print(f"wrote {len(cases)} cases ({sum('error' in c for c in cases)} raise in jinja2)")


if __name__ == "__main__":
    main()
