// Unit tests of the Jinja engine behind chat templates. The expected outputs of the table were
// produced by Python jinja2 3.1.6 in HF transformers' configuration (trim_blocks, lstrip_blocks,
// loopcontrols); "fails" means jinja2 raised.
#include <gtest/gtest.h>

#include <ctime>

#include "tokenizer/chat_template.h"

namespace kiln {
namespace {

ChatTemplateOptions FixedClockOptions() {
  ChatTemplateOptions options;
  options.strftime_now = [](std::string_view format) {
    std::tm t{};
    t.tm_year = 2024 - 1900;
    t.tm_mon = 6;
    t.tm_mday = 26;
    char buf[64];
    size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &t);
    return std::string(buf, n);
  };
  return options;
}

Result<std::string> Render(std::string_view source, std::string_view context_json = "{}",
                           ChatTemplateOptions options = FixedClockOptions()) {
  KILN_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Parse(source, std::move(options)));
  return t.Render(nlohmann::ordered_json::parse(context_json));
}

struct Case {
  const char* name;
  const char* source;
  const char* context;
  const char* expected;
  bool fails;
};

const Case kCases[] = {
    {"TrimAndLstripBlocks", R"J({% if true %}
  a
{% endif %}
b)J",
     R"J({})J",
     R"J(  a
b)J",
     false},
    {"DashStripsAllWhitespace", R"J(  {%- if true -%}  x  {%- endif -%}  
 y)J",
     R"J({})J", R"J(xy)J", false},
    {"ExpressionsKeepNewlines", R"J({{ 'a' }}
{{ 'b' }}
)J",
     R"J({})J",
     R"J(a
b)J",
     false},
    {"PlusDisablesLstrip", R"J({%+ if true %}x{% endif %}|  {% if true %}y{% endif %})J", R"J({})J",
     R"J(x|  y)J", false},
    {"CommentsAreTrimmed", R"J({# c #}
  {# d #}
z)J",
     R"J({})J", R"J(z)J", false},
    {"LoopIndexes",
     R"J({% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %})J",
     R"J({"xs": ["a", "b"]})J", R"J(1021TrueFalse2|2110FalseTrue2|)J", false},
    {"LoopNeighboursAndCycle",
     R"J({% for x in xs %}{{ loop.previtem | default('-') }}{{ x }}{{ loop.nextitem | default('-') }}{{ loop.cycle('o','e') }} {% endfor %})J",
     R"J({"xs": [1, 2, 3]})J", R"J(-12o 123e 23-o )J", false},
    {"LoopFilterAndElse",
     R"J({% for x in xs if x > 1 %}{{ x }}{% if loop.last %}!{% endif %}{% else %}none{% endfor %})J",
     R"J({"xs": [1, 2, 3]})J", R"J(23!)J", false},
    {"BreakContinue",
     R"J({% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %})J",
     R"J({"xs": [1, 2, 3, 4, 5]})J", R"J(13)J", false},
    {"TupleUnpackingOverItems", R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %})J",
     R"J({"d": {"b": 1, "a": 2}})J", R"J(b=1;a=2;)J", false},
    {"MacroDefaults",
     R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', punct='?') }})J",
     R"J({})J", R"J(Hi Ann! Hi Bo?)J", false},
    {"NamespaceCarriesOutOfLoop",
     R"J({% set ns = namespace(count=0) %}{% for x in [1,2,3] %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }})J",
     R"J({})J", R"J(6)J", false},
    {"SetInLoopDoesNotLeak",
     R"J({% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }})J", R"J({})J",
     R"J(1)J", false},
    {"BlockSet", R"J({% set body %}a{{ 1 + 1 }}b{% endset %}[{{ body }}])J", R"J({})J",
     R"J([a2b])J", false},
    {"Arithmetic",
     R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.0 }} {{ 0.5 + 1 }} {{ 10 / 5 }})J",
     R"J({})J", R"J(3 -4 1 2 3.5 1024 1.0 1.5 2.0)J", false},
    {"PythonReprOfValues", R"J({{ [1, 'a', none, true, 1.5] }} {{ {'k': [1]} }} {{ "it's" ~ 1 }})J",
     R"J({})J", R"J([1, 'a', None, True, 1.5] {'k': [1]} it's1)J", false},
    {"Slices", R"J({{ 'abc'[::-1] }} {{ [1,2,3][1:] }} {{ 'hello'[1:3] }} {{ [1,2,3][-1] }})J",
     R"J({})J", R"J(cba [2, 3] el 3)J", false},
    {"StringMethods",
     R"J({{ '  x  '.strip() }}|{{ 'a,b,c'.split(',') }}|{{ 'Hello'.startswith('He') }}|{{ 'x'.upper() }}|{{ 'ab'.replace('a', 'z') }}|{{ 'hello world'.title() }})J",
     R"J({})J", R"J(x|['a', 'b', 'c']|True|X|zb|Hello World)J", false},
    {"ToJson", R"J({{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é"\n' | tojson }})J",
     R"J({"d": {"b": [1, 2.5, null, true], "a": "x"}})J",
     R"J({"b": [1, 2.5, null, true], "a": "x"}|{
  "b": [
    1,
    2.5,
    null,
    true
  ],
  "a": "x"
}|"é\"\n")J",
     false},
    {"SelectAttrMapJoin",
     R"J({{ xs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(', ') }}|{{ xs | rejectattr('role', 'equalto', 'user') | list | length }})J",
     R"J({"xs": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]})J",
     R"J(a, c|1)J", false},
    {"CommonFilters",
     R"J({{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ 'ab' | upper }}|{{ ' t ' | trim }}|{{ [3,1,2] | sort | first }}|{{ [1,2,3] | last }}|{{ [1,2] | sum }}|{{ 'x' | string }}|{{ '3' | int + 1 }})J",
     R"J({})J", R"J(dflt|e|AB|t|1|3|3|x|4)J", false},
    {"IndentDictsortUnique",
     R"J({{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ {'b': 1, 'a': 2} | dictsort }}|{{ [1,1,2] | unique | list }})J",
     R"J({})J",
     R"J(a
  b|  a
  b|[('a', 2), ('b', 1)]|[1, 2])J",
     false},
    {"Tests",
     R"J({{ x is defined }}{{ y is not defined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ {} is mapping }}{{ [] is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is integer }}{{ 1.5 is float }}{{ true is boolean }})J",
     R"J({"x": 1})J", R"J(TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue)J", false},
    {"OperatorsAndConditionals",
     R"J({{ 'b' in 'abc' }}{{ 2 in [1,2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}{{ 1 if false else 2 }}{{ 1 == 1.0 }}{{ not 0 and 1 or 2 }})J",
     R"J({})J", R"J(TrueTrueTrueTrue2True1)J", false},
    {"AttributeAndItem",
     R"J({{ m.content }}{{ m['role'] }}{{ m.get('x', 'dx') }}{{ m.missing }}!)J",
     R"J({"m": {"content": "C", "role": "R"}})J", R"J(CRdx!)J", false},
    {"RaiseException", R"J({{ raise_exception('bad ' ~ 1) }})J", R"J({})J", R"J()J", true},
    {"StrftimeNowIsInjectable", R"J({{ strftime_now('%Y-%m-%d') }})J", R"J({})J", R"J(2024-07-26)J",
     false},
    {"RangeAndDict",
     R"J({% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 7, 2) | list }}{{ dict(a=1) }})J",
     R"J({})J", R"J(012[1, 3, 5]{'a': 1})J", false},
    {"FilterAndCallBlocks",
     R"J({% filter upper %}abc{% endfilter %}{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}in{% endcall %})J",
     R"J({})J", R"J(ABC[in])J", false},
    {"Raw", R"J({% raw %}{{ x }}{% endraw %})J", R"J({})J", R"J({{ x }})J", false},
    {"SandboxForbidsMutation", R"J({{ xs.append(1) }})J", R"J({"xs": []})J", R"J()J", true},
    {"AttributeOfUndefinedFails", R"J({{ none.x }}|{{ u.x }})J", R"J({})J", R"J()J", true},
    {"TypeErrors", R"J({{ 1 + 'a' }})J", R"J({})J", R"J()J", true},
    {"IteratingNoneFails", R"J({% for x in none %}{% endfor %})J", R"J({})J", R"J()J", true},
};

class JinjaTable : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaTable, MatchesJinja2) {
  const Case& c = GetParam();
  auto got = Render(c.source, c.context);
  if (c.fails) {
    EXPECT_FALSE(got.ok()) << "rendered: " << *got;
  } else {
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, c.expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Jinja, JinjaTable, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(JinjaErrors, ParseErrorNamesLineAndColumn) {
  auto t = ChatTemplate::Parse("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("line 3, column 10"), std::string::npos)
      << t.status().message();
}

TEST(JinjaErrors, UnclosedBlockAndUnknownTag) {
  auto unclosed = ChatTemplate::Parse("{% for x in xs %}{{ x }}");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_NE(unclosed.status().message().find("endfor"), std::string::npos);
  auto unknown = ChatTemplate::Parse("\n  {% frobnicate %}");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("line 2, column 6"), std::string::npos)
      << unknown.status().message();
  auto string = ChatTemplate::Parse("{{ 'abc }}");
  EXPECT_FALSE(string.ok());
}

TEST(JinjaErrors, RuntimeErrorNamesLocationAndMessage) {
  auto got = Render("ok\n{{ raise_exception('System role not supported') }}");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("line 2, column 4"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("System role not supported"), std::string::npos);
}

TEST(JinjaLimits, LoopIterations) {
  ChatTemplateOptions options = FixedClockOptions();
  options.limits.max_loop_iterations = 100;
  auto got = Render("{% for i in range(10) %}{% for j in range(20) %}{% endfor %}{% endfor %}",
                    "{}", options);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted);
  auto big_range = Render("{{ range(1000000000) | length }}", "{}", options);
  EXPECT_EQ(big_range.status().code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, RecursionDepth) {
  auto got = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(got.status().message().find("max_call_depth"), std::string::npos);
}

TEST(JinjaLimits, OutputSize) {
  ChatTemplateOptions options = FixedClockOptions();
  options.limits.max_output_bytes = 1000;
  auto got = Render("{% for i in range(100) %}0123456789abcdef{% endfor %}", "{}", options);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, ParserNesting) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  auto t = ChatTemplate::Parse(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nesting"), std::string::npos);
}

TEST(JinjaLimits, DeepButAllowedNestingRenders) {
  std::string deep = "{{ " + std::string(100, '(') + "1" + std::string(100, ')') + " }}";
  EXPECT_EQ(*Render(deep), "1");
  std::string blocks;
  for (int i = 0; i < 100; ++i) blocks += "{% if true %}";
  blocks += "x";
  for (int i = 0; i < 100; ++i) blocks += "{% endif %}";
  EXPECT_EQ(*Render(blocks), "x");
}

TEST(JinjaValues, IntegerOverflowFailsCleanly) {
  EXPECT_EQ(Render("{{ 9223372036854775807 + 1 }}").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Render("{{ 3 ** 100 }}").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(*Render("{{ (-1) ** 7 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"), "-1 1024 0.5");
}

TEST(JinjaValues, StripUsesPythonWhitespace) {
  // Expected output from jinja2: NBSP, ideographic space and U+2028 are whitespace in Python.
  auto got = Render(
      "[{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|"
      "{{ '\u00e9\u00e9a\u00e9'.strip('\u00e9') }}]",
      R"({"s": "\u00a0\u3000 hi\u2028 \u00a0"})");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "[hi|hi|hi\u2028 \u00a0|\u00a0\u3000 hi|a|a]");
}

TEST(JinjaValues, RoundIsPythonRound) {
  // Expected output from jinja2 (Python round(): half to even).
  EXPECT_EQ(*Render(R"({{ 2.5 | round }} {{ 3.5 | round }} {{ 1.25 | round(1) }} )"
                    R"({{ 2.7 | round(0, "floor") }} {{ -2.5 | round }})"),
            "2.0 4.0 1.2 2.0 -2.0");
}

TEST(JinjaValues, CaseMappingBeyondAscii) {
  // Expected output from jinja2 (Python's Unicode case mapping).
  auto got = Render(
      "{{ s | upper }}|{{ s | lower }}|{{ s.title() }}|{{ s | title }}|{{ s | capitalize }}|"
      "{{ s is lower }}|{{ 'é' is lower }}|{{ 'ÉΣ' is upper }}|{{ 'straße' | upper }}|"
      "{{ 'ŁÓDŹ ÿ' | lower }}|{{ ['Éa', 'éb', 'Ec'] | sort }}",
      R"({"s": "héllo wörld-ñandú ПРИВЕТ мир άλφα"})");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got,
            "HÉLLO WÖRLD-ÑANDÚ ПРИВЕТ МИР ΆΛΦΑ|héllo wörld-ñandú привет мир άλφα|"
            "Héllo Wörld-Ñandú Привет Мир Άλφα|Héllo Wörld-Ñandú Привет Мир Άλφα|"
            "Héllo wörld-ñandú привет мир άλφα|False|True|True|STRASSE|łódź ÿ|"
            "['Ec', 'Éa', 'éb']");
}

TEST(JinjaValues, RenderIsRepeatableAndContextOrderKept) {
  auto t = ChatTemplate::Parse("{{ tools | tojson }}");
  ASSERT_TRUE(t.ok());
  auto ctx = nlohmann::ordered_json::parse(R"({"tools": {"z": 1, "a": {"y": 2.0, "b": "ü"}}})");
  auto first = t->Render(ctx);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, R"({"z": 1, "a": {"y": 2.0, "b": "ü"}})");
  EXPECT_EQ(*t->Render(ctx), *first);
}

}  // namespace
}  // namespace kiln
