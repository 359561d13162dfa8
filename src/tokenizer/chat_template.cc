#include "tokenizer/chat_template.h"

#include <ctime>

#include "tokenizer/jinja_lexer.h"

namespace kiln {

struct ChatTemplate::Program {
  std::string source;
  jinja::StmtList body;
  ChatTemplateOptions options;
};

namespace {

std::string LocalStrftime(std::string_view format) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &local);
  return std::string(buf, n);
}

}  // namespace

jinja::Value ValueFromJson(const nlohmann::ordered_json& json) {
  using jinja::Value;
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::ValueList items;
      for (const auto& item : json) items.push_back(ValueFromJson(item));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::ValueDict dict;
      for (const auto& [k, v] : json.items()) dict.entries.emplace_back(Value(k), ValueFromJson(v));
      return Value::Dict(std::move(dict));
    }
    default:
      return Value::Undefined();
  }
}

Result<ChatTemplate> ChatTemplate::Parse(std::string_view source, ChatTemplateOptions options) {
  auto program = std::make_shared<Program>();
  program->source = jinja::NormalizeNewlines(source);
  KILN_ASSIGN_OR_RETURN(program->body, jinja::ParseTemplate(program->source, options.parse_limits));
  if (!options.strftime_now) options.strftime_now = LocalStrftime;
  program->options = std::move(options);
  return ChatTemplate(std::move(program));
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return InvalidArgument("chat template context must be a JSON object");
  return Render(ValueFromJson(context));
}

Result<std::string> ChatTemplate::Render(const jinja::Value& context) const {
  if (!context.is_dict()) return InvalidArgument("chat template context must be a dict");
  return jinja::RenderProgram(program_->body, program_->source, context, program_->options.limits,
                              program_->options.strftime_now);
}

Result<std::string> SelectChatTemplate(std::string_view tokenizer_config_json,
                                       std::string_view name) {
  nlohmann::ordered_json config =
      nlohmann::ordered_json::parse(tokenizer_config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgument("tokenizer_config.json is not a JSON object");
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return NotFound("tokenizer_config.json has no chat_template");
  }
  if (it->is_string()) {
    if (!name.empty() && name != "default") {
      return NotFound("tokenizer_config.json has a single chat_template, not one named '" +
                      std::string(name) + "'");
    }
    return it->get<std::string>();
  }
  if (!it->is_array()) {
    return InvalidArgument("chat_template must be a string or a list of {name, template}");
  }
  std::string wanted = name.empty() ? "default" : std::string(name);
  std::string names;
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return InvalidArgument("chat_template list entries must be {name, template} strings");
    }
    if (entry["name"] == wanted) return entry["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
  }
  return NotFound("no chat template named '" + wanted + "' (have: " + names + ")");
}

}  // namespace kiln
