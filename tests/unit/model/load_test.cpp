// load_model on files: valid files, and every way a file can be wrong, each a ConfigError naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "batchsweep/errors.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/model.hpp"
#include "unit/model/model_test_util.hpp"

namespace bsw {
namespace {

using ::testing::HasSubstr;

constexpr const char* kValid = R"({"name": "m", "input": {"type": "vector", "features": 4},
  "layers": [{"type": "linear", "out_features": 3}]})";

// Loads `path` expecting a whole-file ConfigError; returns its message.
std::string file_error(const std::string& path) {
  try {
    static_cast<void>(load_model(path));
  } catch (const ConfigError& e) {
    // A name that is neither a preset nor a file is named as the flag gave it; a file's errors by the file.
    EXPECT_THAT(e.source(), ::testing::AnyOf(::testing::Eq(path), ::testing::Eq("--model " + path)));
    EXPECT_EQ(e.json_path(), "");
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_THAT(e.what(), ::testing::StartsWith(e.source() + ": "));
    return e.what();
  }
  ADD_FAILURE() << "no error loading " << path;
  return {};
}

TEST(LoadModel, ReadsAValidFile) {
  const test::TempDir dir;
  const std::string path = dir.write("model.json", kValid);
  const ModelSpec m = load_model(path);
  EXPECT_EQ(m.name, "m");
  EXPECT_EQ(m.source, path);
  ASSERT_EQ(m.layers.size(), 1u);
  EXPECT_EQ(m.layers[0].out_features, 3);
}

TEST(LoadModel, AcceptsBracketsInsideStringsAndAByteOrderMark) {
  const test::TempDir dir;
  const std::string text =
      std::string(R"({"name": ")") + std::string(150, '[') + R"(\"{{{{", "input": {"type":
    "vector", "features": 4}, "layers": [{"type": "linear", "out_features": 3}]})";
  EXPECT_EQ(load_model(dir.write("brackets.json", text)).name, std::string(150, '[') + "\"{{{{");
  EXPECT_EQ(load_model(dir.write("bom.json", "\xEF\xBB\xBF" + std::string(kValid))).name, "m");
}

TEST(LoadModel, ErrorsInsideAFileNameTheFileAndThePath) {
  const test::TempDir dir;
  const std::string path = dir.write("bad.json", R"({"name": "m", "input": {"type": "vector", "features": 4},
    "layers": [{"type": "linear", "out_features": 3, "activation": "gelu2"}]})");
  try {
    static_cast<void>(load_model(path));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.source(), path);
    EXPECT_EQ(e.json_path(), "layers[0].activation");
    EXPECT_THAT(e.what(), HasSubstr(path + ": layers[0].activation: unknown activation 'gelu2'"));
  }
}

TEST(LoadModel, MissingFileListsThePresets) {
  const test::TempDir dir;
  const std::string message = file_error((dir.path() / "absent.json").string());
  EXPECT_THAT(message, HasSubstr("no such preset or file"));
  EXPECT_THAT(
      message,
      HasSubstr(
          "presets: bert-base, gpt2-small, mlp, mlp-large, resnet-50, resnet-small, tiny-lm, vit-base"));
}

TEST(LoadModel, UnknownNameListsThePresetsAndSuggestsOne) {
  const std::string message = file_error("gpt2");
  EXPECT_THAT(message, HasSubstr("--model gpt2: no such preset or file"));
  EXPECT_THAT(message, HasSubstr("did you mean 'gpt2-small'?"));
  EXPECT_THAT(message, HasSubstr("tiny-lm"));
  EXPECT_THAT(file_error("bert_base"), HasSubstr("did you mean 'bert-base'?"));
}

// A preset's name is the preset; a file of that name here is said, not silently passed over.
TEST(LoadModel, APresetNameWithAFileOfThatNameHereSaysSo) {
  EXPECT_TRUE(load_model("mlp").notes.empty());
  const test::TempDir dir;
  static_cast<void>(dir.write("mlp", kValid));
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const ModelSpec preset = load_model("mlp");
  const ModelSpec file = load_model("./mlp");
  std::filesystem::current_path(before);
  EXPECT_EQ(preset.source, "preset:mlp");
  ASSERT_EQ(preset.notes.size(), 1u);
  EXPECT_EQ(preset.notes[0],
            "--model mlp: the preset mlp, not the file mlp here (give ./mlp to read the file)");
  EXPECT_EQ(file.name, "m");
}

TEST(LoadModel, RefusesADirectory) {
  const test::TempDir dir;
  EXPECT_THAT(file_error(dir.path().string()), HasSubstr("is a directory"));
}

TEST(LoadModel, RefusesAnEmptyFile) {
  const test::TempDir dir;
  EXPECT_THAT(file_error(dir.write("empty.json", "")), HasSubstr("is empty"));
  EXPECT_THAT(file_error(dir.write("blank.json", " \n\t\r\n")), HasSubstr("is empty"));
}

// A binary file, and a NUL in the middle of an otherwise plausible config: named by its NUL byte, not as the
// syntax error the parser would make of it.
TEST(LoadModel, RefusesABinaryFileByItsNulByte) {
  const test::TempDir dir;
  std::string bytes =
      "\x7f"
      "ELF";
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  EXPECT_THAT(file_error(dir.write("model.bin", bytes)),
              HasSubstr("model.bin: has a NUL byte at byte 5: not a text file (a binary file?)"));
  const std::string middle = std::string("{\"name\": \"t\"") + '\0' +
                             ", \"input\": {\"type\": \"vector\", \"features\": 4}, \"layers\": []}";
  EXPECT_THAT(file_error(dir.write("middle.json", middle)),
              HasSubstr("middle.json: has a NUL byte at byte 13"));
}

// A file saved as UTF-16 (Windows' "Unicode") is named as such, and a NUL after a valid object (which the
// parser stops at) is refused rather than the rest ignored.
TEST(LoadModel, RefusesUtf16AndANulByte) {
  const test::TempDir dir;
  std::string utf16 = "\xFF\xFE";
  for (const char c : std::string(R"({"name": "m"})")) {
    utf16.push_back(c);
    utf16.push_back('\0');
  }
  EXPECT_THAT(file_error(dir.write("u.json", utf16)),
              HasSubstr("is UTF-16 text (Windows' \"Unicode\"): save it as UTF-8"));
  EXPECT_THAT(file_error(dir.write("u.json", utf16.substr(2))), HasSubstr("is UTF-16 text"));
  EXPECT_THAT(file_error(dir.write("n.json", std::string("{\"name\": \"m\"}\0junk", 18))),
              HasSubstr("has a NUL byte at byte 14: not a text file"));
}

// A link to nothing, or a loop of links, is a file the user meant: named as such, not "no such preset".
TEST(LoadModel, NamesADanglingOrLoopingSymlink) {
  const test::TempDir dir;
  const std::filesystem::path dangling = dir.path() / "dangling.json";
  std::filesystem::create_symlink("nothere.json", dangling);
  EXPECT_THAT(file_error(dangling.string()),
              HasSubstr("is a symbolic link to nothere.json, which leads to no file"));
  const std::filesystem::path a = dir.path() / "a.json", b = dir.path() / "b.json";
  std::filesystem::create_symlink(b, a);
  std::filesystem::create_symlink(a, b);
  EXPECT_THAT(file_error(a.string()), HasSubstr("a.json: is a loop of symbolic links"));
}

TEST(LoadModel, RefusesInvalidJsonWithTheParserPosition) {
  const test::TempDir dir;
  const std::string message = file_error(dir.write("broken.json", R"({"name": "m", "layers": [}")"));
  EXPECT_THAT(message, HasSubstr("is not valid JSON: line 1, column 26: syntax error"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("binary")));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("json.exception")));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("parse error at")));
}

// A hand-written config's usual non-JSON: said where an editor finds it (line and column), and named.
TEST(LoadModel, SyntaxErrorsNameTheLineColumnAndTheLikelyMistake) {
  const test::TempDir dir;
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"{\n  \"name\": \"m\",\n  \"layers\": [\n    {\"type\": \"relu\"},\n  ]\n}",
       "line 5, column 3: syntax error while parsing value - unexpected ']'; expected '[', '{', or a literal "
       "(a trailing comma before ']': JSON allows none)"},
      {"{\n  // the model\n  \"name\": \"m\"\n}", "line 2, column 3: "},
      {"{\"name\": \"m\", \"optimizer\": {\"learning_rate\": NaN}}",
       "(NaN and Infinity are not JSON numbers)"},
      {"{\"name\": \"m\", \"x\": -Infinity}", "(NaN and Infinity are not JSON numbers)"},
      {"{'name': 'm'}", "line 1, column 2: "},
      // A missing comma is found at the next member, on the next line: said as such.
      {"{\n  \"name\": \"m\"\n  \"layers\": []\n}",
       "line 3, column 10: syntax error while parsing object - unexpected string literal; expected '}' (a "
       "missing comma before it?)"},
      {"[1 2]", "(a missing comma before it?)"},
      // A leading zero reads as the number 0 and then another: said as the zero, not a comma.
      {"{\"name\": \"m\", \"dim\": 0768}", "(JSON numbers take no leading zero: write 768, not 0768)"},
      {"[-007]", "(JSON numbers take no leading zero: write -7, not -007)"},
      {"{\"a\": [1, 2}", "unexpected '}'; expected ']'"},
      {"{ name: \"m\" }", "(keys take double quotes)"},
      {"{\"name\": \"m\", \"bias\": True}", "(JSON writes true, false and null, in lower case)"},
      {"{\"name\": \"m\", \"x\": None}", "(JSON writes true, false and null, in lower case)"},
  };
  for (const Case& c : cases) {
    const std::string message = file_error(dir.write("c.json", c.text));
    EXPECT_THAT(message, HasSubstr(c.expected)) << c.text;
  }
  EXPECT_THAT(file_error(dir.write("c.json", "{\n  // the model\n}")), HasSubstr("(comments are not JSON)"));
  // A bracket of the other kind is not a missing comma.
  EXPECT_THAT(file_error(dir.write("c.json", "{\"a\": [1, 2}")), ::testing::Not(HasSubstr("missing comma")));
  EXPECT_THAT(file_error(dir.write("c.json", "{\"a\": 1]")), ::testing::Not(HasSubstr("missing comma")));
  EXPECT_THAT(file_error(dir.write("c.json", "{\"a\": 0768}")), ::testing::Not(HasSubstr("missing comma")));
  // A bad surrogate stops on the escape's last hex digit, inside a string: no number is there.
  for (const char* text :
       {R"({"name": "m\ud83d\u00e9"})", R"(["\ud800\u0041"])", R"({"name": "\udc00\u0041"})"})
    EXPECT_THAT(file_error(dir.write("c.json", text)), ::testing::Not(HasSubstr("leading zero"))) << text;
  EXPECT_THAT(file_error(dir.write("c.json", "{'name': 'm'}")),
              HasSubstr("(JSON strings take double quotes)"));
}

// The position said for any byte nlohmann gives, an empty text and one past the end included.
TEST(JsonSyntaxError, StaysInsideTheText) {
  EXPECT_EQ(
      bsw::json_syntax_error("", 1, "[json.exception.parse_error.101] parse error at line 1, column 1: x"),
      "x");
  EXPECT_EQ(bsw::json_syntax_error("{", 0, "y"), "y");
  EXPECT_EQ(bsw::json_syntax_error("{\n", 9, "z"), "line 2, column 1: z");
  EXPECT_EQ(bsw::json_syntax_error("[1,\n 2,]", 8, "w"),
            "line 2, column 4: w (a trailing comma before ']': JSON allows none)");
  // Words that only begin like NaN or Infinity are not taken for them.
  EXPECT_EQ(bsw::json_syntax_error(R"({"mode": infer})", 10, "v"), "line 1, column 10: v");
  EXPECT_EQ(bsw::json_syntax_error(R"({"x": -inf})", 8, "u"),
            "line 1, column 8: u (NaN and Infinity are not JSON numbers)");
  // A number beyond a double's range (nlohmann gives no position): found as a number, not inside a string
  // or a longer number.
  const std::string overflow = "[json.exception.out_of_range.406] number overflow parsing '1e400'";
  EXPECT_EQ(bsw::json_syntax_error("{\"name\": \"x 1e400\", \"a\": 11e400,\n \"b\": 1e400}", 0, overflow),
            "line 2, column 7: the number 1e400 is beyond a double's range");
  EXPECT_EQ(bsw::json_syntax_error("{}", 0, overflow), "the number 1e400 is beyond a double's range");
}

// What the parser quotes of a file that is not UTF-8 reaches stderr as valid, visible text, and is named.
TEST(LoadModel, SaysTextThatIsNotUtf8AsEscapes) {
  const test::TempDir dir;
  const std::string latin1 = file_error(dir.write("l.json", "{\"name\": \"caf\xE9\"}"));
  EXPECT_THAT(latin1, HasSubstr("last read: '\"caf\\xE9\"' (the file is not UTF-8 here, maybe Latin-1 or "
                                "Windows-1252 text: save it as UTF-8)"));
  const std::string boms = file_error(dir.write("b.json", "\xEF\xBB\xBF\xEF\xBB\xBF{}"));
  EXPECT_THAT(boms, HasSubstr("'\\xEF\\xBB\\xBF\\xEF' (the file starts with two UTF-8 byte-order marks"));
  // Characters a terminal hides or acts on (U+202E turns the line around, U+009B starts an escape) too.
  const std::string hidden = file_error(dir.write("h.json", "{\"name\": \"a\xE2\x80\xAE\xC2\x9B\xE9\"}"));
  EXPECT_THAT(hidden, HasSubstr("last read: '\"a\\xE2\\x80\\xAE\\xC2\\x9B\\xE9\"'"));
  // Well-formed UTF-8 stays as written.
  EXPECT_THAT(file_error(dir.write("u.json", "{\"name\": \"café\" x}")), HasSubstr("café"));
}

TEST(LoadModel, SaysANumberTooSmallForADouble) {
  // nlohmann reads 1e-400 as 0.0 without a word: said as written, where it stands, not as "got 0.0".
  EXPECT_EQ(bsw::json_number_underflow("{\"name\": \"1e-400\",\n \"lr\": -0.5e-400}"),
            "line 2, column 8: the number -0.5e-400 is too small for a double (it reads as 0)");
  // Zero written as zero, a subnormal a double holds, and numbers without an exponent read as written.
  for (const char* fine : {"[0e-400, 0.000e5, -0.0, 0]", "[1e-310, 4.9e-324]", "[0.00000000001, 12, -3.5]",
                           "{\"a\": \"\\\" 1e-999\"}"})
    EXPECT_EQ(bsw::json_number_underflow(fine), std::nullopt) << fine;
  const test::TempDir dir;
  EXPECT_THAT(
      file_error(dir.write("tiny.json", "{\"name\": \"m\", \"x\": 1e-400}")),
      HasSubstr("tiny.json: line 1, column 20: the number 1e-400 is too small for a double (it reads as 0)"));
}

TEST(LoadModel, RefusesDeepNestingBeforeParsing) {
  const test::TempDir dir;
  const std::string deep = std::string(512 * 1024, '[') + std::string(512 * 1024, ']');
  EXPECT_THAT(file_error(dir.write("deep.json", deep)),
              HasSubstr("nested deeper than 64 levels (at byte 65)"));
  // 31 residuals are one too many: the message says the limit in residuals, which is what one nests.
  std::string layers = R"([{"type": "linear", "out_features": 4}])";
  for (int i = 0; i < 31; ++i) layers = R"([{"type": "residual", "layers": )" + layers + "}]";
  const std::string model =
      R"({"name": "m", "input": {"type": "vector", "features": 4}, "layers": )" + layers + "}";
  EXPECT_THAT(file_error(dir.write("nest.json", model)),
              HasSubstr("not a model config, whose residuals nest at most 30 deep (each adds two levels)"));
  layers = layers.substr(layers.find("\"layers\": ") + 10);  // 30 residuals load
  layers.resize(layers.size() - 2);
  EXPECT_NO_THROW((void)load_model(dir.write(
      "ok.json", R"({"name": "m", "input": {"type": "vector", "features": 4}, "layers": )" + layers + "}")));
}

TEST(LoadModel, RefusesAHugeDocument) {
  const test::TempDir dir;
  std::string huge = kValid;
  huge.resize((size_t{16} << 20) + 1, ' ');
  EXPECT_THAT(file_error(dir.write("huge.json", huge)), HasSubstr("larger than 16 MiB"));
  // Exactly at the limit is still read.
  huge.resize(size_t{16} << 20);
  EXPECT_EQ(load_model(dir.write("limit.json", huge)).name, "m");
}

TEST(LoadModel, PresetsWinOverNothingElse) {
  const ModelSpec m = load_model("tiny-lm");
  EXPECT_EQ(m.source, "preset:tiny-lm");
  try {
    static_cast<void>(load_model(""));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("presets: "));
  }
}

}  // namespace
}  // namespace bsw
