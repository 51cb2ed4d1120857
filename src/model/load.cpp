// load_model: a preset embedded at build time, or a JSON file read with guards (size, nesting depth, binary
// data) so that a wrong file gives a clear ConfigError instead of a crash or a cryptic parser message.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/json_keys.hpp"
#include "batchsweep/model.hpp"
#include "model/suggest.hpp"

namespace bsw {
namespace detail {
// Generated from configs/models/*.json by cmake/EmbedPresets.cmake: name -> JSON text, sorted by name.
extern const std::vector<std::pair<std::string_view, std::string_view>> kPresets;
}  // namespace detail

namespace {

using nlohmann::json;

// A model config is a small document; anything larger is a wrong file.
constexpr size_t kMaxDocumentBytes = size_t{16} << 20;
// nlohmann's parser recurses once per level: deeper documents are refused before parsing.

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw ConfigError(source, "", message);
}

std::string preset_list() {
  std::vector<std::string> names = preset_names();
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Reads at most kMaxDocumentBytes; regular files, pipes and devices alike (process substitution works).
std::string read_config_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    // A file in a directory this user may not enter: the file may be there, and the reason is the permission.
    if (ec.value() == EACCES) fail(path, fmt::format("cannot be opened: {}", std::strerror(EACCES)));
    // A link to nothing (or a loop of links) is a file the user meant: said as such, not "no such preset".
    const bool loop = ec.value() == ELOOP;
    if (fs::is_symlink(fs::symlink_status(path, ec))) {
      if (loop) fail(path, "is a loop of symbolic links");
      const fs::path target = fs::read_symlink(path, ec);
      fail(path, fmt::format("is a symbolic link to {}, which leads to no file",
                             ec ? std::string("a target that cannot be read") : target.string()));
    }
    std::string message = "no such preset or file";
    std::vector<std::string> names = preset_names();
    const std::vector<std::string_view> views(names.begin(), names.end());
    std::error_code json_ec;
    if (!path.ends_with(".json") && fs::is_regular_file(path + ".json", json_ec))
      message += fmt::format("; did you mean the file '{}.json'?", path);  // the extension left off
    else if (const auto near = model_detail::nearest_name(path, views))
      message += fmt::format("; did you mean '{}'?", *near);
    // Named as the flag that gave it: the name was neither a preset nor a file, so there is no file to name.
    fail(fmt::format("--model {}", path), fmt::format("{} (presets: {})", message, preset_list()));
  }
  if (fs::is_directory(status))
    fail(fmt::format("--model {}", path), "is a directory, not a model config file");

  std::string why;
  std::optional<std::string> text = read_input(path, kMaxDocumentBytes, "a model config", why);
  if (!text) fail(path, why);
  return std::move(*text);
}

bool looks_binary(std::string_view text) {
  return text.find('\0') != std::string_view::npos;
}

// Windows' "Unicode" (UTF-16, either byte order): a byte-order mark, or ASCII with a NUL after (or before)
// every character.
bool looks_utf16(std::string_view text) {
  if (text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF")) return true;
  return text.size() >= 2 && (text[0] == '\0') != (text[1] == '\0');
}

// Refuses documents nested deeper than kMaxJsonDepth before nlohmann's recursive parser sees them.
void check_nesting(std::string_view text, const std::string& source) {
  if (const auto at = json_too_deep_at(text))
    fail(source, fmt::format("is nested deeper than {} levels (at byte {}): not a model config, whose "
                             "residuals nest at most {} deep (each adds two levels)",
                             kMaxJsonDepth, *at + 1, (kMaxJsonDepth - 3) / 2));
}

json parse_text(std::string_view text, const std::string& source) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }))
    fail(source, "is empty: expected a JSON model config");
  if (looks_binary(text) && looks_utf16(text))
    fail(source, "is UTF-16 text (Windows' \"Unicode\"): save it as UTF-8");
  // A NUL is no part of a JSON text, wherever it is (nlohmann stops at one: what follows would be read by no
  // one, and one mid-document reads as a syntax error that hides it).
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(source, fmt::format("has a NUL byte at byte {}: not a text file (a binary file?), expected a JSON "
                             "model config",
                             nul + 1));
  check_nesting(text, source);
  try {
    json doc =
        json::parse(text, DuplicateKeyCheck([&](const std::string& path) {
                      throw ConfigError(source, path,
                                        "is given twice in the same object; JSON keeps only the last, so "
                                        "remove one");
                    }));
    if (auto underflow = json_number_underflow(text)) fail(source, *underflow);
    return doc;
  } catch (const json::parse_error& e) {
    // A YAML file (`name: my-model`), named by its extension: the format is JSON, not a typo in it.
    const bool yaml = source.ends_with(".yaml") || source.ends_with(".yml");
    fail(source, fmt::format("is not valid JSON{}: {}",
                             yaml ? " (YAML is not read: write the model config in JSON)" : "",
                             json_syntax_error(text, e.byte, e.what())));
  } catch (const json::out_of_range& e) {
    // nlohmann refuses numbers beyond a double's range (e.g. 1e400) with out_of_range.406, not a parse_error.
    fail(source, fmt::format("is not valid JSON: {}", json_syntax_error(text, 0, e.what())));
  }
}

// Whether an error at config path `error` is about what --set put at `set`: the same place or inside it. An
// error at a layer that holds it may come from elsewhere (a shape an earlier layer changed): not said to be
// this one's.
bool on_path(std::string_view error, std::string_view set) {
  return !error.empty() && error.starts_with(set) &&
         (error.size() == set.size() || error[set.size()] == '.' || error[set.size()] == '[' ||
          error[set.size()] == ' ');
}

// parse_model on the document with the overrides applied. An error the parser (or lower) finds names the
// --set on its path, or, where none is (a shape that no longer chains three layers later), every --set: the
// file alone may be fine.
ModelSpec parse_overridden(nlohmann::json doc, const std::string& source,
                           const std::vector<ModelOverride>& overrides) {
  if (overrides.empty()) return parse_model(doc, source);
  apply_model_overrides(doc, overrides, source);
  try {
    ModelSpec model = parse_model(doc, source);
    for (const ModelOverride& o : overrides) model.overrides.push_back(o.text);
    return model;
  } catch (const ConfigError& e) {
    std::string message = e.what();
    const std::string prefix =
        e.source() + ": " + (e.json_path().empty() ? std::string() : e.json_path() + ": ");
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    std::string named;
    for (const ModelOverride& o : overrides)
      if (on_path(e.json_path(), o.path))
        named += fmt::format("{}--set {}", named.empty() ? "" : ", ", printable_text(o.text));
    if (!named.empty())
      throw ConfigError(e.source(), e.json_path(), fmt::format("{} (from {})", message, named));
    // None on its path: those that could have led to it. The optimizer and the name shape no layer, and a
    // layer shapes no optimizer: a learning rate is not named beside a shape error.
    const auto section = [](std::string_view path) {
      return on_path(path, "optimizer") ? 1 : on_path(path, "name") ? 2 : 0;
    };
    for (const ModelOverride& o : overrides)
      if (section(o.path) == section(e.json_path()))
        named += fmt::format("{}--set {}", named.empty() ? "" : ", ", printable_text(o.text));
    if (named.empty())
      for (const ModelOverride& o : overrides)
        named += fmt::format("{}--set {}", named.empty() ? "" : ", ", printable_text(o.text));
    throw ConfigError(e.source(), e.json_path(), fmt::format("{} (with {})", message, named));
  }
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  names.reserve(detail::kPresets.size());
  for (const auto& [name, text] : detail::kPresets) names.emplace_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string_view preset_text(std::string_view name) {
  for (const auto& [preset, text] : detail::kPresets)
    if (preset == name) return text;
  return {};
}

ModelSpec load_model(std::string_view name_or_path) {
  return load_model(name_or_path, {});
}

ModelSpec load_model(std::string_view name_or_path, const std::vector<ModelOverride>& overrides) {
  if (const std::string_view text = preset_text(name_or_path); !text.empty()) {
    const std::string source = fmt::format("preset:{}", name_or_path);
    ModelSpec model = parse_overridden(parse_text(text, source), source, overrides);
    // A file of that name here is not read: said, since its author may have meant it.
    std::error_code ec;
    if (std::filesystem::is_regular_file(std::filesystem::path(name_or_path), ec))
      model.notes.push_back(
          fmt::format("--model {0}: the preset {0}, not the file {0} here (give ./{0} to read "
                      "the file)",
                      name_or_path));
    return model;
  }
  const std::string path(name_or_path);
  if (path.empty())
    fail("--model", fmt::format("an empty name is neither a preset nor a file (presets: {})", preset_list()));
  const std::string text = read_config_file(path);
  return parse_overridden(parse_text(text, path), path, overrides);
}

}  // namespace bsw
