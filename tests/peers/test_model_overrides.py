"""Tests of the PyTorch peer's --set PATH=VALUE (bench/peers/torchpeer/overrides.py), which follows batchsweep's
(src/model/override.cpp, src/model/load.cpp).

Run: python3 -m unittest discover -s tests/peers -v   (from the repository root)

Parsing, applying, loading and the command line need only the standard library; the sweep skips without torch,
and the comparison with `batchsweep plan --set` without a batchsweep binary ($BATCHSWEEP_BIN or build/batchsweep).
"""

import copy
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_torch_peer import (FAST, PRESET_PARAMETERS, TINY_MLP, find_batchsweep, run_main, torch,  # noqa: E402
                             validate, write_json)
from torchpeer import PEER_NAME  # noqa: E402
from torchpeer.cli import Settings, batchsweep_parameters, parse_settings, settings_json  # noqa: E402
from torchpeer.config import load_model, lower  # noqa: E402
from torchpeer.errors import ConfigError, UsageError  # noqa: E402
from torchpeer.overrides import (apply_model_overrides, on_path, parse_model_override,  # noqa: E402
                                 printable)

EXAMPLE = ("(keys joined by '.', list elements as [N]: --set input.sequence_length=1024 or --set "
           "'layers[1].repeat=24')")
PEER = os.path.join(ROOT, "bench", "peers", "torch_sweep.py")
TINY_LM_SEQUENCE = 64
TINY_LM_DIM = 128


def sets(*texts):
    return [parse_model_override(t) for t in texts]


def refused(test: unittest.TestCase, error_type, call) -> str:
    with test.assertRaises(error_type) as caught:
        call()
    return str(caught.exception)


class OverrideParseTest(unittest.TestCase):
    def test_paths(self):
        cases = {
            "input.sequence_length=1": ("input", "sequence_length"),
            "layers[1].layers[0].out_channels=8": ("layers", 1, "layers", 0, "out_channels"),
            "a[0][1]=1": ("a", 0, 1),
            "$schema=x": ("$schema",),
            "a_b-c.D9=1": ("a_b-c", "D9"),
            "layers[10].repeat=2": ("layers", 10, "repeat"),
            "a[0]=1": ("a", 0),
            "a[123456789]=1": ("a", 123456789),  # nine digits: the most
        }
        for text, steps in cases.items():
            with self.subTest(text=text):
                o = parse_model_override(text)
                self.assertEqual(o.steps, steps)
                self.assertEqual(o.path, text.split("=")[0])

    def test_text_is_trimmed_and_split_at_the_first_equals(self):
        o = parse_model_override(" \t layers[1].repeat  =  24 \t")
        self.assertEqual((o.text, o.path, o.value), ("layers[1].repeat=24", "layers[1].repeat", 24))
        o = parse_model_override("name=a=b")
        self.assertEqual((o.path, o.value, o.text), ("name", "a=b", "name=a=b"))

    def test_values_are_json_or_a_bare_word(self):
        cases = {
            "a=32": 32, "a=-1": -1, "a=1e-3": 1e-3, "a=0.5": 0.5, "a=true": True, "a=false": False, "a=null": None,
            'a="gelu"': "gelu", "a=gelu": "gelu", 'a=""': "", "a=hello world": "hello world",
            "a=NaN": "NaN",  # a bare word, as in batchsweep (only a number-like start is JSON gone wrong)
            'a={"type": "sgd", "momentum": 0}': {"type": "sgd", "momentum": 0},
            'a=[{"type": "layernorm"}, 2]': [{"type": "layernorm"}, 2],
            "a=1e-310": 1e-310,  # a subnormal reads as written
            "a=0e-400": 0.0,  # written as 0
        }
        for text, value in cases.items():
            with self.subTest(text=text):
                self.assertEqual(parse_model_override(text).value, value)
                self.assertIs(type(parse_model_override(text).value), type(value))

    def test_errors_name_the_set(self):
        cases = [
            ("a", "--set a: expected PATH=VALUE, e.g. --set input.sequence_length=1024 or --set "
                  "'layers[1].repeat=24'"),
            ("=1", "--set =1: no path before '=', e.g. --set input.sequence_length=1024"),
            (" = 1", "--set = 1: no path before '='"),
            ("a.b=", "--set a.b=: no value after '=' (an empty string is written \"\": --set 'a.b=\"\"')"),
            ("a.=1", f"--set a.=1: a. is not a config path: a missing key at character 3 {EXAMPLE}"),
            ("[0]=1", "--set [0]=1: [0] is not a config path: '[' at character 1"),
            (".a=1", "--set .a=1: .a is not a config path: '.' at character 1"),
            ("a..b=1", "a..b is not a config path: '.' at character 3"),
            ("a b=1", "a b is not a config path: ' ' at character 2"),
            ("a[]=1", "a[] is not a config path: a list index that is not a whole number at character 3"),
            ("a[-1]=1", "a[-1] is not a config path: a list index that is not a whole number at character 3"),
            ("a[1234567890]=1", "a[1234567890] is not a config path: a list index too large for any config at "
                                "character 3"),
            ("a[1=1", "a[1 is not a config path: a '[' without its ']' at character 4"),
            ("a[1]x=1", "a[1]x is not a config path: 'x' at character 5"),
            ("a/b=1", "a/b is not a config path: '/' at character 2"),
            # [01] is [1] spelled otherwise: refused at its first digit
            ("layers[01].repeat=2", f"--set layers[01].repeat=2: layers[01].repeat is not a config path: a list index "
                                    f"with a leading zero at character 8 {EXAMPLE}"),
            ("a[00]=1", "a[00] is not a config path: a list index with a leading zero at character 3"),
            ("a[1][007]=1", "a[1][007] is not a config path: a list index with a leading zero at character 6"),
            # the whole character quoted, not a byte of it
            ("café=1", f"--set café=1: café is not a config path: 'é' at character 4 {EXAMPLE}"),
            ("a\u200b=1", "--set a\\xE2\\x80\\x8B=1: a\\xE2\\x80\\x8B is not a config path: '\\xE2\\x80\\x8B' at "
                         "character 2"),
            ("a=True", "--set a=True: True is Python's; JSON writes true"),
            ("a=False", "--set a=False: False is Python's; JSON writes false"),
            ("a=None", "--set a=None: None is Python's; JSON writes null"),
            ("a=1O24", "--set a=1O24: 1O24 is not a JSON value: line 1, column 2"),
            ("a=01", "01 is not a JSON value: line 1, column 2: Extra data (JSON numbers take no leading zero)"),
            ("a=+1", "+1 is not a JSON value"),
            ("a=.5", ".5 is not a JSON value"),
            ('a="gelu', '"gelu is not a JSON value'),
            ("a=[1, 2", "[1, 2 is not a JSON value"),
            ("a={'x': 1}", "{'x': 1} is not a JSON value"),
            ("a=[NaN]", "[NaN] is not a JSON value: line 1, column 2: NaN is not a JSON number (NaN and Infinity are "
                        "not JSON numbers)"),
            ("a=-Infinity", "-Infinity is not a JSON value"),
            ("a=1e400", "--set a=1e400: 1e400 is not a JSON value: line 1, column 1: the number 1e400 is beyond a "
                        "double's range"),
            ("a=1e-400", "--set a=1e-400: 1e-400 is not a JSON value: line 1, column 1: the number 1e-400 is too "
                         "small for a double (it reads as 0)"),
            ("a=[1, 2.5e-999]", "[1, 2.5e-999] is not a JSON value: line 1, column 5: the number 2.5e-999 is too small "
                                "for a double"),
            # columns in UTF-8 bytes, as batchsweep counts them
            ('a=["é", 1e-400]', '["é", 1e-400] is not a JSON value: line 1, column 8: the number 1e-400 is too '
                                'small'),
            ('a=["é", 1e400]', '["é", 1e400] is not a JSON value: line 1, column 8: the number 1e400 is beyond'),
            ('a={"x": 1, "x": 2}', "the value gives x twice; JSON keeps only the last, so remove one"),
            ('a=[{"y": {"x": 1, "x": 2}}]', "the value gives [0].y.x twice"),
            ("a=" + "[" * 65 + "]" * 65, "the value is nested deeper than 64 levels"),
            ("a=1\n", None),  # trimmed of spaces and tabs only: the newline is a control character
            ("a=x\ty", "--set a=x\\x09y: holds a control character"),
            ("a=\x1b[31m", "--set a=\\x1B[31m: holds a control character"),
            ("a=\x7f", "holds a control character"),
            ("a=\u009b", "--set a=\\xC2\\x9B: holds a control character"),
            # bytes that are not UTF-8, as sys.argv holds them (surrogate escapes), and a lone surrogate
            ("a=\udcff", "--set a=\\xFF: is not UTF-8 text (a byte no character begins with or continues); a config "
                         "is UTF-8"),
            ("caf\udce9=1", "--set caf\\xE9=1: is not UTF-8 text"),
            ("a=\udce2\udc82", "--set a=\\xE2\\x82: is not UTF-8 text"),
            ("a=\ud800", "--set a=\\xED\\xA0\\x80: is not UTF-8 text"),
            ("a=\udcff\x1b", "--set a=\\xFF\\x1B: is not UTF-8 text"),  # before the control character
            ("\udcff", "--set \\xFF: is not UTF-8 text"),  # before PATH=VALUE
        ]
        for text, message in cases:
            with self.subTest(text=text):
                error = refused(self, UsageError, lambda: parse_model_override(text))
                self.assertTrue(error.startswith("--set "), error)
                if message:
                    self.assertIn(message, error)
        self.assertIn("holds a control character", refused(self, UsageError, lambda: parse_model_override("a=1\n")))

    def test_a_value_of_more_than_64_kib_belongs_in_a_file(self):
        self.assertEqual(len(parse_model_override('x="' + "a" * ((64 << 10) - 4) + '"').text), 64 << 10)
        error = refused(self, UsageError, lambda: parse_model_override("x=" + "1" * (64 << 10)))
        self.assertEqual(error, f"--set x={'1' * 46}...: is {(64 << 10) + 2} bytes long; a value that large belongs in "
                                "a model file (--model)")
        # counted in UTF-8 bytes, as batchsweep counts them, and cut at a character's start (48 bytes at most)
        error = refused(self, UsageError, lambda: parse_model_override("x=" + "é" * (32 << 10)))
        self.assertEqual(error, f"--set x={'é' * 23}...: is {(64 << 10) + 2} bytes long; a value that large belongs "
                                "in a model file (--model)")
        error = refused(self, UsageError, lambda: parse_model_override("x=a" + "é" * (32 << 10)))
        self.assertTrue(error.startswith(f"--set x=a{'é' * 22}...: is {(64 << 10) + 3} bytes long"), error)
        # too long is said first, of bytes that are not UTF-8 too
        error = refused(self, UsageError, lambda: parse_model_override("x=" + "\udcff" * (64 << 10)))
        shown = "\\xFF" * 46
        self.assertTrue(error.startswith(f"--set x={shown}...: is {(64 << 10) + 2} bytes long"), error)

    def test_the_example_is_one_a_shell_takes(self):
        # A shell globs an unquoted layers[1].repeat=24: the hint quotes it.
        self.assertIn("--set 'layers[1].repeat=24'", refused(self, UsageError, lambda: parse_model_override("a")))
        self.assertIn("--set 'layers[1].repeat=24'", refused(self, UsageError, lambda: parse_model_override("a.=1")))

    def test_printable(self):
        self.assertEqual(printable("a\x1bb\u200bc\udce9é"), "a\\x1Bb\\xE2\\x80\\x8Bc\\xE9é")


class OverrideApplyTest(unittest.TestCase):
    def doc(self):
        return copy.deepcopy({"name": "m", "input": {"type": "vector", "features": 4},
                              "layers": [{"type": "linear", "out_features": 8},
                                         {"type": "residual", "layers": [{"type": "linear", "out_features": 8}]},
                                         {"type": "linear", "out_features": 2}],
                              "empty": []})

    def apply(self, doc, *texts):
        apply_model_overrides(doc, sets(*texts), "m.json")
        return doc

    def test_sets_adds_and_makes(self):
        doc = self.apply(self.doc(), "input.features=16", "layers[0].activation=gelu", "optimizer.type=sgd",
                         "optimizer.momentum=0.5", "layers[1].layers[0].bias=false",
                         "layers[2]={\"type\": \"flatten\"}",
                         "a.b.c=1")
        self.assertEqual(doc["input"], {"type": "vector", "features": 16})
        self.assertEqual(doc["layers"][0], {"type": "linear", "out_features": 8, "activation": "gelu"})
        self.assertEqual(doc["optimizer"], {"type": "sgd", "momentum": 0.5})  # made, then filled
        self.assertEqual(doc["layers"][1]["layers"][0]["bias"], False)
        self.assertEqual(doc["layers"][2], {"type": "flatten"})
        self.assertEqual(doc["a"], {"b": {"c": 1}})

    def test_in_order_and_values_not_shared(self):
        doc = self.apply(self.doc(), "layers[0]={\"type\": \"layernorm\"}", "layers[0].repeat=2")
        self.assertEqual(doc["layers"][0], {"type": "layernorm", "repeat": 2})
        overrides = sets('optimizer={"type": "sgd"}')
        a, b = self.doc(), self.doc()
        apply_model_overrides(a, overrides, "a")
        apply_model_overrides(b, overrides, "b")
        a["optimizer"]["momentum"] = 0.1
        self.assertEqual(b["optimizer"], {"type": "sgd"})
        self.assertEqual(overrides[0].value, {"type": "sgd"})

    def test_errors_name_the_set_and_the_source(self):
        cases = [
            ("layers[3].out_features=1",
             "--set layers[3].out_features=1: layers in m.json has 3 elements (layers[0] to layers[2])"),
            ("layers[1].layers[1]=1",
             "--set layers[1].layers[1]=1: layers[1].layers in m.json has 1 element (layers[1].layers[0] to "
             "layers[1].layers[0])"),
            ("empty[0]=1", "--set empty[0]=1: empty in m.json is an empty list"),
            ("input[0]=1", "--set input[0]=1: input in m.json is an object, not a list"),
            ("name[0]=1", "--set name[0]=1: name in m.json is the string \"m\", not a list"),
            ("layers.type=x", "--set layers.type=x: layers in m.json is a list, which has no key type"),
            ("input.features.x=1",
             "--set input.features.x=1: input.features in m.json is the number 4, which has no key x"),
            ("layers[0].type.x=1",
             "--set layers[0].type.x=1: layers[0].type in m.json is the string \"linear\", which has no key x"),
            ("shortcut[0].type=linear", "--set shortcut[0].type=linear: m.json has no shortcut, so there is no list to "
                                        "take element [0] of"),
            ("layers[1].shortcut[0]=1",
             "--set layers[1].shortcut[0]=1: m.json has no layers[1].shortcut, so there is no list to take element [0] "
             "of"),
        ]
        for text, message in cases:
            with self.subTest(text=text):
                self.assertEqual(refused(self, UsageError, lambda: self.apply(self.doc(), text)), message)
        doc = self.apply(self.doc(), "flag=true")
        self.assertIn("the boolean true, which has no key x", refused(self, UsageError,
                                                                        lambda: self.apply(doc, "flag.x=1")))
        doc = self.apply(self.doc(), "nothing=null")
        self.assertIn("nothing in m.json is null, not a list", refused(self, UsageError,
                                                                       lambda: self.apply(doc, "nothing[0]=1")))

    def test_each_path_once(self):
        error = refused(self, UsageError, lambda: self.apply(self.doc(), "input.features=2", "layers[0].bias=false",
                                                             " input.features = 3"))
        self.assertEqual(error, "--set input.features=3: --set input.features=2 sets input.features too; give each "
                                "path once")
        doc = self.doc()
        with self.assertRaises(UsageError):
            self.apply(doc, "input.features=2", "input.features=2")
        self.assertEqual(doc, self.doc())  # refused before anything is set

    def test_the_whole_before_its_parts(self):
        cases = [
            (["layers[0].bias=false", "layers[0]={\"type\": \"flatten\"}"],
             "--set layers[0]={\"type\": \"flatten\"}: it replaces layers[0], inside which --set layers[0].bias=false "
             "came first and would be lost; give the whole first, then its parts"),
            (["input.features=2", "input={\"type\": \"vector\", \"features\": 3}"],
             "--set input={\"type\": \"vector\", \"features\": 3}: it replaces input, inside which --set "
             "input.features=2 came first"),
            (["layers[1].layers[0].bias=false", "layers=[]"],
             "--set layers=[]: it replaces layers, inside which --set layers[1].layers[0].bias=false came first"),
            # the first later --set that replaces an earlier one's whole
            (["a.b.c=1", "a.b=2", "a=3"], "--set a.b=2: it replaces a.b, inside which --set a.b.c=1 came first"),
            (["x=1", "a[0]=1", "a=2"], "--set a=2: it replaces a, inside which --set a[0]=1 came first"),
            # a path given twice is said first, wherever it is
            (["a.b=1", "a=2", "a.b=3"], "--set a.b=3: --set a.b=1 sets a.b too; give each path once"),
        ]
        for texts, message in cases:
            with self.subTest(sets=texts):
                doc = self.doc()
                error = refused(self, UsageError, lambda: self.apply(doc, *texts))
                self.assertTrue(error.startswith(message), error)
                self.assertEqual(doc, self.doc())  # refused before anything is set
        # The whole, then its parts; a sibling, or a key that only starts the same, is no part.
        doc = self.apply(self.doc(), "layers[1]={\"type\": \"linear\", \"out_features\": 8}", "layers[1].bias=false",
                         "input.features=2", "input.features_x=3", "layers[0].out_features=4", "layers[0].bias=true")
        self.assertEqual(doc["layers"][1], {"type": "linear", "out_features": 8, "bias": False})
        self.assertEqual(doc["input"], {"type": "vector", "features": 2, "features_x": 3})
        doc = {"layers": [{} for _ in range(11)]}
        apply_model_overrides(doc, sets("layers[10].x=1", "layers[1]=2"), "m.json")
        self.assertEqual((doc["layers"][10], doc["layers"][1]), ({"x": 1}, 2))

    def test_a_document_that_is_not_an_object_is_left_to_the_parser(self):
        doc = [1, 2]
        apply_model_overrides(doc, sets("a=1"), "m.json")
        self.assertEqual(doc, [1, 2])


class OverrideLoadTest(unittest.TestCase):
    def test_tiny_lm_with_a_longer_sequence(self):
        base = load_model("tiny-lm")
        self.assertEqual(base.overrides, [])
        model = load_model("tiny-lm", overrides=sets("input.sequence_length=128"))
        self.assertEqual(model.config["input"]["sequence_length"], 128)
        self.assertEqual(model.config["name"], "tiny-lm")  # keeps its name
        self.assertEqual((model.source, model.argument), ("preset:tiny-lm", "tiny-lm"))
        self.assertEqual([o.text for o in model.overrides], ["input.sequence_length=128"])
        # One learned position per token: 64 more positions of dim 128.
        grown = lower(model.config, model.source).parameters
        self.assertEqual(grown - PRESET_PARAMETERS["tiny-lm"], (128 - TINY_LM_SEQUENCE) * TINY_LM_DIM)
        self.assertEqual(grown - PRESET_PARAMETERS["tiny-lm"], 8192)
        # The preset itself is read afresh: nothing stays changed.
        self.assertEqual(load_model("tiny-lm").config, base.config)

    def test_a_file_with_sets(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = write_json(tmp, "tiny.json", TINY_MLP)
            model = load_model(path, overrides=sets("layers[0].out_features=64", "optimizer.type=sgd",
                                                    "layers[1].activation=gelu"))
        self.assertEqual(model.config["layers"][0]["out_features"], 64)
        self.assertEqual(model.config["layers"][1]["activation"], "gelu")
        self.assertEqual(model.config["optimizer"], {"type": "sgd", "learning_rate": 0.01, "momentum": 0.9})
        self.assertEqual(lower(model.config, path).parameters, 16 * 64 + 64 + 64 * 4 + 4)

    def test_parser_errors_name_the_set_on_their_path(self):
        def error(*texts):
            return refused(self, ConfigError, lambda: load_model("tiny-lm", overrides=sets(*texts)))

        self.assertEqual(error("layers[1].heads=3"),
                         "preset:tiny-lm: layers[1].heads: 3 does not divide dim 128 (from --set layers[1].heads=3)")
        self.assertEqual(error("input.sequence_length=\"x\"", "layers[1].repeat=3"),
                         "preset:tiny-lm: input.sequence_length: expected an integer, got a string (from --set "
                         "input.sequence_length=\"x\")")
        # Set inside the field at fault, and the field inside the set.
        self.assertIn("(from --set layers[1]={\"type\": \"transformer_block\"})",
                      error("layers[1]={\"type\": \"transformer_block\"}"))
        self.assertIn("unknown key 'foo' at the top level", error("foo.bar=1"))
        # An error at what holds a --set's path (foo, for foo.bar) is not said to be that --set's: every --set.
        self.assertTrue(error("foo.bar=1").endswith("(with --set foo.bar=1)"), error("foo.bar=1"))
        self.assertTrue(error("input.sequence_length=32", "foo.bar=1").endswith(
            "(with --set input.sequence_length=32, --set foo.bar=1)"))
        # Off every set's path: all of them, the file alone may be fine.
        self.assertEqual(error("input.sequence_length=32", "layers[0].dim=6"),
                         "preset:tiny-lm: layers[1].heads: 4 does not divide dim 6 (with --set "
                         "input.sequence_length=32, --set layers[0].dim=6)")
        # A config error without sets is as it was.
        with tempfile.TemporaryDirectory() as tmp:
            path = write_json(tmp, "bad.json", dict(TINY_MLP, loss="hinge"))
            self.assertNotIn("--set", refused(self, ConfigError, lambda: load_model(path)))
            overrides = sets("layers[0].out_features=3")
            error = refused(self, ConfigError, lambda: load_model(path, overrides=overrides))
            self.assertIn("loss: unknown loss 'hinge' (allowed: cross_entropy, mse) (with --set "
                          "layers[0].out_features=3)", error)
        # What cannot be applied is a usage error.
        self.assertEqual(refused(self, UsageError, lambda: load_model("tiny-lm", overrides=sets("layers[4].dim=3"))),
                         "--set layers[4].dim=3: layers in preset:tiny-lm has 4 elements (layers[0] to layers[3])")

    def test_on_path(self):
        self.assertTrue(on_path("layers[1].heads", "layers[1].heads"))
        self.assertTrue(on_path("layers[1].heads", "layers[1]"))
        self.assertTrue(on_path("layers[1][0]", "layers[1]"))
        self.assertTrue(on_path("layers[1] (repeat 2)", "layers[1]"))
        # what holds the --set's path is not on it
        self.assertFalse(on_path("layers[1]", "layers[1].heads"))
        self.assertFalse(on_path("layers", "layers[1].heads"))
        self.assertFalse(on_path("foo", "foo.bar"))
        self.assertFalse(on_path("layers[1].heads", "layers[1].head"))
        self.assertFalse(on_path("layers[10]", "layers[1]"))
        self.assertFalse(on_path("", "a"))


class OverrideCliTest(unittest.TestCase):
    def test_settings_keep_the_sets_in_order(self):
        s = parse_settings(["--model", "tiny-lm", "--set", "input.sequence_length = 32", "--set", "layers[1].repeat=3"])
        self.assertEqual([o.text for o in s.model_sets], ["input.sequence_length=32", "layers[1].repeat=3"])
        self.assertEqual(parse_settings([]).model_sets, [])

    def test_errors_exit_2_naming_the_set_and_write_nothing(self):
        cases = [
            (["--set", "a=True"], "--set a=True: True is Python's; JSON writes true"),
            (["--set", "input.sequence_length"], "--set input.sequence_length: expected PATH=VALUE"),
            (["--set", "layers[4].dim=3"], "--set layers[4].dim=3: layers in preset:tiny-lm has 4 elements"),
            (["--set", "input.sequence_length=32", "--set", "input.sequence_length=16"],
             "--set input.sequence_length=16: --set input.sequence_length=32 sets input.sequence_length too; give each "
             "path once"),
            (["--set", "layers[1].heads=3"],
             "preset:tiny-lm: layers[1].heads: 3 does not divide dim 128 (from --set layers[1].heads=3)"),
            (["--set"], "argument --set: expected one argument"),
            (["--set", "a=\udcff"], "--set a=\\xFF: is not UTF-8 text (a byte no character begins with or continues); "
                                    "a config is UTF-8"),
            (["--set", "layers[01].dim=3"], "--set layers[01].dim=3: layers[01].dim is not a config path: a list index "
                                            "with a leading zero at character 8"),
            (["--set", "layers[1].heads=2", "--set", "layers[1]={\"type\": \"linear\", \"out_features\": 8}"],
             "--set layers[1]={\"type\": \"linear\", \"out_features\": 8}: it replaces layers[1], inside which --set "
             "layers[1].heads=2 came first and would be lost; give the whole first, then its parts"),
        ]
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            for argv, message in cases:
                with self.subTest(argv=argv):
                    code, out, err = run_main(["--model", "tiny-lm", "--batch", "1", "--device", "cpu", "--json",
                                               report] + argv)
                    self.assertEqual(code, 2, err)
                    self.assertIn(f"{PEER_NAME}: {message}", err)
                    self.assertEqual(out, "")
                    self.assertFalse(os.path.exists(report))

    @unittest.skipIf(os.name != "posix", "bytes in argv are POSIX's")
    def test_bytes_that_are_not_utf8_on_the_command_line(self):
        # As a shell passes them: sys.argv holds the byte as a surrogate escape.
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            done = subprocess.run([sys.executable, PEER, "--model", "tiny-lm", "--batch", "1", "--device", "cpu",
                                   "--json", report, "--set", b"name=caf\xe9"], capture_output=True, timeout=60,
                                  check=False, env=dict(os.environ, PYTHONUTF8="1"))
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertIn(b"--set name=caf\\xE9: is not UTF-8 text (a byte no character begins with or continues); a "
                          b"config is UTF-8\n", done.stderr)
            self.assertEqual(done.stdout, b"")
            self.assertFalse(os.path.exists(report))

    def test_report_settings(self):
        model = load_model("tiny-lm")
        graph = lower(model.config, model.source)
        self.assertNotIn("model_overrides", settings_json(Settings(), model, "cpu", graph, "checked", {}))
        model = load_model("tiny-lm", overrides=sets(" input.sequence_length = 32 ", "layers[1].repeat=1"))
        graph = lower(model.config, model.source)
        settings = settings_json(Settings(), model, "cpu", graph, "checked", {})
        self.assertEqual(settings["model_overrides"], ["input.sequence_length=32", "layers[1].repeat=1"])
        self.assertEqual(settings["model"]["input"]["sequence_length"], 32)
        self.assertEqual(settings["model"]["layers"][1]["repeat"], 1)

    def test_the_parameter_check_plans_with_the_same_sets(self):
        with tempfile.TemporaryDirectory() as tmp:
            binary, argv_file = os.path.join(tmp, "batchsweep"), os.path.join(tmp, "argv")
            with open(binary, "w", encoding="utf-8") as f:
                f.write(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{argv_file}'\necho '{{\"parameters\": 5}}'\n")
            os.chmod(binary, os.stat(binary).st_mode | stat.S_IEXEC)
            model = load_model("tiny-lm", overrides=sets("input.sequence_length = 128", "layers[0].dim=64"))
            self.assertEqual(batchsweep_parameters(binary, model), 5)
            with open(argv_file, encoding="utf-8") as f:
                argv = f.read().splitlines()
            self.assertEqual(argv[:3], ["plan", "--model", "tiny-lm"])
            self.assertEqual(argv[-4:], ["--set", "input.sequence_length=128", "--set", "layers[0].dim=64"])
            batchsweep_parameters(binary, load_model("tiny-lm"))
            with open(argv_file, encoding="utf-8") as f:
                self.assertNotIn("--set", f.read().splitlines())


@unittest.skipIf(find_batchsweep() is None, "no batchsweep binary ($BATCHSWEEP_BIN or build/batchsweep)")
class OverrideBatchsweepTest(unittest.TestCase):
    """The peer's --set against batchsweep's: the same counts, and the same words for what --set itself refuses."""

    def plan(self, *texts):
        argv = [find_batchsweep(), "plan", "--model", "tiny-lm", "--batch", "1", "--backend", "cpu", "--mode", "infer",
                "--json", "-"]
        for t in texts:
            argv += ["--set", t]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def test_parameters_match_plan(self):
        for texts in (["input.sequence_length=128"], ["layers[1].repeat=3", "layers[0].dim=64"],
                      ["layers[1].mlp_ratio=2", "input.vocab_size=500", "layers[3].out_features=500"]):
            with self.subTest(sets=texts):
                done = self.plan(*texts)
                self.assertEqual(done.returncode, 0, done.stderr)
                plan = json.loads(done.stdout)
                model = load_model("tiny-lm", overrides=sets(*texts))
                self.assertEqual(plan["parameters"], lower(model.config, model.source).parameters)
                self.assertEqual(plan["model_overrides"], [o.text for o in model.overrides])
                self.assertEqual(batchsweep_parameters(find_batchsweep(), model), plan["parameters"])

    def test_the_same_refusals(self):
        cases = [["a"], ["=1"], ["a="], ["a.=1"], ["a[]=1"], ["a[1234567890]=1"], ["a[1=1"], ["a b=1"], ["a=True"],
                 ["a=1e-400"], ["a=1e400"], ['a=[{"y": {"x": 1, "x": 2}}]'], ["layers[4].dim=3"],
                 ["layers.x=1"], ["layers[0][1]=1"], ["input.sequence_length.x=1"], ["foo[0]=1"],
                 ["input.sequence_length=1", "input.sequence_length=2"], ["a=x\ty"],
                 ["layers[01].dim=3"], ["café=1"], ["a\u200b=1"], ["a=\udcff"], ["caf\udce9=1"],
                 ['a=["é", 1e-400]'], ['a=["é", 1e400]'], ["x=" + "é" * (32 << 10)], ["x=a" + "é" * (32 << 10)],
                 ["layers[1].heads=2", 'layers[1]={"type": "linear", "out_features": 8}'],
                 ["a.b.c=1", "a.b=2", "a=3"], ["a.b=1", "a=2", "a.b=3"]]
        for texts in cases:
            with self.subTest(sets=texts):
                done = self.plan(*texts)
                self.assertEqual(done.returncode, 2, done.stderr)
                try:
                    load_model("tiny-lm", overrides=sets(*texts))
                except UsageError as e:
                    peer = str(e)
                else:
                    self.fail("the peer accepted it")
                self.assertEqual(done.stderr.strip(), f"batchsweep: error: {peer}")

    def test_parser_errors_name_the_same_sets(self):
        for texts in (["layers[1].heads=0"], ["input.sequence_length=\"x\"", "layers[1].repeat=3"], ["foo.bar=1"],
                      ["input.sequence_length=32", "foo.bar=1"]):
            with self.subTest(sets=texts):
                done = self.plan(*texts)
                self.assertEqual(done.returncode, 2, done.stderr)
                with self.assertRaises(ConfigError) as caught:
                    load_model("tiny-lm", overrides=sets(*texts))
                named = str(caught.exception)[str(caught.exception).rindex(" ("):]
                self.assertTrue(done.stderr.strip().endswith(named), (done.stderr, named))


@unittest.skipIf(torch is None, "PyTorch is not importable")
class OverrideSweepTest(unittest.TestCase):
    def test_tiny_lm_with_a_shorter_sequence(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "report.json")
            code, _, err = run_main(["--model", "tiny-lm", "--batch", "1", "--set", "input.sequence_length=32",
                                     "--device", "cpu", "--json", path] + FAST)
            self.assertEqual(code, 0, err)
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        validate(self, doc)
        settings = doc["settings"]
        self.assertEqual(settings["model_overrides"], ["input.sequence_length=32"])
        self.assertEqual(settings["model"]["name"], "tiny-lm")
        self.assertEqual(settings["model"]["input"]["sequence_length"], 32)
        self.assertEqual(settings["parameters"], PRESET_PARAMETERS["tiny-lm"] - (TINY_LM_SEQUENCE - 32) * TINY_LM_DIM)
        if find_batchsweep():
            self.assertEqual(settings["parameter_check"], f"matches `batchsweep plan` ({settings['parameters']})")
        self.assertIn("--set", doc["command"])
        point = doc["points"][0]
        self.assertEqual(point["status"], "ok")
        self.assertAlmostEqual(point["tokens_per_second"], point["samples_per_second"] * 32)


if __name__ == "__main__":
    unittest.main()
