// --set PATH=VALUE: a value put into a model config document before it is parsed. The path is written as the
// parser's errors name config paths (`layers[1].repeat`), so a user can copy one from an error or from
// `batchsweep presets NAME`; every check on the value is the parser's own, with the --set named.
#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "batchsweep/errors.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/json_keys.hpp"
#include "batchsweep/model.hpp"

namespace bsw {
namespace {

using nlohmann::json;

// A --set argument is a line on a command line; a longer one is a file's worth, which --model reads.
constexpr size_t kMaxOverrideBytes = size_t{64} << 10;
// The largest array index a path takes: no config holds more than 10,000 layers.
constexpr size_t kMaxIndexDigits = 9;

constexpr std::string_view kExample = "e.g. --set input.sequence_length=1024 or --set 'layers[1].repeat=24'";

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

[[noreturn]] void refuse(std::string_view text, const std::string& message) {
  throw UsageError(fmt::format("--set {}: {}", printable_text(text), message));
}

bool valid_utf8(std::string_view text) {
  try {
    static_cast<void>(json(std::string(text)).dump());
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// The first `limit` bytes, not splitting a UTF-8 sequence, and "..." where cut.
std::string clip(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + "...";
}

// The character at byte i, whole (a UTF-8 sequence), for a message pointing at it.
std::string character_at(std::string_view text, size_t i) {
  size_t end = i + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  return printable_text(text.substr(i, end - i));
}

bool key_character(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '$';
}

std::vector<ModelOverride::Step> parse_path(std::string_view text, std::string_view path) {
  const auto bad = [&](size_t at, std::string_view what) {
    refuse(text, fmt::format("{} is not a config path: {} at character {} (keys joined by '.', list elements "
                             "as [N]: {})",
                             printable_text(path), what, at + 1, kExample.substr(5)));
  };
  std::vector<ModelOverride::Step> steps;
  size_t i = 0;
  while (true) {
    const size_t start = i;
    while (i < path.size() && key_character(path[i])) ++i;
    if (i == start)
      bad(i, i < path.size() ? fmt::format("'{}'", character_at(path, i)) : std::string("a missing key"));
    steps.push_back({std::string(path.substr(start, i - start)), 0});
    while (i < path.size() && path[i] == '[') {
      const size_t digits = ++i;
      while (i < path.size() && std::isdigit(static_cast<unsigned char>(path[i])) != 0) ++i;
      if (i == digits) bad(i, "a list index that is not a whole number");
      // [01] would be [1] under another spelling: one path, two names (and "set twice" unseen).
      if (path[digits] == '0' && i - digits > 1) bad(digits, "a list index with a leading zero");
      if (i - digits > kMaxIndexDigits) bad(digits, "a list index too large for any config");
      if (i >= path.size() || path[i] != ']')
        // `[1e1]`: the ']' is there, the index is no whole number; `[1.repeat`: the '[' has no ']'.
        bad(i, i < path.size() && path.find_first_of("[.]", i) != std::string_view::npos &&
                       path[path.find_first_of("[.]", i)] == ']'
                   ? "a list index that is not a whole number"
                   : "a '[' without its ']'");
      steps.push_back({std::string(), static_cast<size_t>(std::strtoull(path.data() + digits, nullptr, 10))});
      ++i;
    }
    if (i == path.size()) return steps;
    if (path[i] != '.') bad(i, fmt::format("'{}'", character_at(path, i)));
    ++i;
  }
}

json parse_value(std::string_view text, std::string_view value) {
  // Python's spellings, typed from habit: JSON's are lowercase, and null is no value a config field takes.
  for (const auto& [python, spelled] :
       {std::pair<std::string_view, std::string_view>{"True", "true"}, {"False", "false"}, {"None", "null"}})
    if (value == python) refuse(text, fmt::format("{} is Python's; JSON writes {}", python, spelled));
  if (json_too_deep_at(value))
    refuse(text, fmt::format("the value is nested deeper than {} levels", kMaxJsonDepth));
  try {
    json parsed =
        json::parse(value, DuplicateKeyCheck([&](const std::string& path) {
                      refuse(text, fmt::format("the value gives {} twice; JSON keeps only the last, so "
                                               "remove one",
                                               path));
                    }));
    if (auto underflow = json_number_underflow(value))
      refuse(text, fmt::format("{} is not a JSON value: {}", printable_text(value), *underflow));
    return parsed;
  } catch (const json::exception& e) {
    // What starts as JSON does (an object, a list, a quoted string, a number) is taken as JSON gone wrong,
    // not as a string: `--set layers[0].out_features=1O24` is a typo, not the name "1O24".
    const char first = value.front();
    if (first == '{' || first == '[' || first == '"' || first == '-' || first == '+' || first == '.' ||
        std::isdigit(static_cast<unsigned char>(first)) != 0) {
      const auto* parse_error = dynamic_cast<const json::parse_error*>(&e);
      refuse(text, fmt::format("{} is not a JSON value: {}", printable_text(value),
                               json_syntax_error(value, parse_error ? parse_error->byte : 0, e.what())));
    }
    return json(std::string(value));  // a bare word: a string (`activation=gelu`)
  }
}

std::string kind_of(const json& node) {
  if (node.is_object()) return "an object";
  if (node.is_array()) return "a list";
  if (node.is_string()) return fmt::format("the string {}", printable_text(node.dump()));
  if (node.is_boolean()) return fmt::format("the boolean {}", node.dump());
  if (node.is_null()) return "null";
  return fmt::format("the number {}", node.dump());
}

}  // namespace

ModelOverride parse_model_override(std::string_view text) {
  text = trim(text);
  if (text.size() > kMaxOverrideBytes)
    refuse(
        clip(text, 48),
        fmt::format("is {} bytes long; a value that large belongs in a model file (--model)", text.size()));
  if (!valid_utf8(text))
    refuse(text, "is not UTF-8 text (a byte no character begins with or continues); a config is UTF-8");
  if (has_control_characters(text))
    refuse(text,
           "holds a control character (a newline, a tab inside, an escape), which no config path or value "
           "here needs");
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) refuse(text, fmt::format("expected PATH=VALUE, {}", kExample));
  const std::string_view path = trim(text.substr(0, eq));
  const std::string_view value = trim(text.substr(eq + 1));
  if (path.empty()) refuse(text, fmt::format("no path before '=', {}", kExample));
  if (value.empty())
    refuse(text, fmt::format("no value after '=' (an empty string is written \"\": --set '{}=\"\"')",
                             printable_text(path)));
  ModelOverride o;
  o.steps = parse_path(text, path);
  o.value = parse_value(text, value);
  o.path = std::string(path);
  o.text = fmt::format("{}={}", path, value);
  return o;
}

void apply_model_overrides(json& doc, const std::vector<ModelOverride>& overrides,
                           const std::string& source) {
  // The same path set twice would keep only the last value, as a key given twice in a config would.
  std::map<std::string, const ModelOverride*> by_path;
  for (const ModelOverride& o : overrides) {
    const auto [it, fresh] = by_path.emplace(o.path, &o);
    if (!fresh)
      refuse(o.text, fmt::format("--set {} sets {} too; give each path once",
                                 printable_text(it->second->text), printable_text(o.path)));
  }
  // A later --set of a list or an object that an earlier one set inside would put the earlier value out of
  // the model while the report still names it: the whole, then its parts, is the order that keeps both.
  for (size_t j = 0; j < overrides.size(); ++j)
    for (size_t i = 0; i < j; ++i) {
      const std::string& inner = overrides[i].path;
      const std::string& outer = overrides[j].path;
      if (inner.size() > outer.size() && inner.starts_with(outer) &&
          (inner[outer.size()] == '.' || inner[outer.size()] == '['))
        refuse(
            overrides[j].text,
            fmt::format("it replaces {}, inside which --set {} came first and would be lost; give the whole "
                        "first, then its parts",
                        printable_text(outer), printable_text(overrides[i].text)));
    }
  // A document that is not an object is the parser's to refuse, naming the file.
  if (!doc.is_object()) return;
  for (const ModelOverride& o : overrides) {
    json* node = &doc;
    std::string walked;
    for (size_t i = 0; i < o.steps.size(); ++i) {
      const ModelOverride::Step& step = o.steps[i];
      const bool last = i + 1 == o.steps.size();
      if (!step.key.empty()) {
        if (!node->is_object())
          refuse(o.text, fmt::format("{} in {} is {}, which has no key {}", walked, source, kind_of(*node),
                                     step.key));
        const std::string here = walked.empty() ? step.key : fmt::format("{}.{}", walked, step.key);
        if (last) {
          (*node)[step.key] = o.value;
          break;
        }
        if (!node->contains(step.key)) {
          // A key the config leaves to its default (`optimizer`) is made, for its own keys to be set; a list
          // is not, since which element would be meant is unknown.
          if (o.steps[i + 1].key.empty())
            refuse(o.text, fmt::format("{} has no {}, so there is no list to take element [{}] of", source,
                                       here, o.steps[i + 1].index));
          (*node)[step.key] = json::object();
        }
        node = &(*node)[step.key];
        walked = here;
      } else {
        const std::string here = fmt::format("{}[{}]", walked, step.index);
        if (!node->is_array())
          refuse(o.text, fmt::format("{} in {} is {}, not a list", walked, source, kind_of(*node)));
        if (step.index >= node->size())
          refuse(o.text, node->empty() ? fmt::format("{} in {} is an empty list", walked, source)
                                       : fmt::format("{} in {} has {} element{} ({}[0] to {}[{}])", walked,
                                                     source, node->size(), node->size() == 1 ? "" : "s",
                                                     walked, walked, node->size() - 1));
        if (last) {
          (*node)[step.index] = o.value;
          break;
        }
        node = &(*node)[step.index];
        walked = here;
      }
    }
  }
}

}  // namespace bsw
