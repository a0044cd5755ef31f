"""Structured outputs on a real kvserve with random-weight models (whose unconstrained output is
noise: only the constraint makes an output valid). Through the official `openai` npm package
(structured_checks.mjs: JSON Schema corpus via response_format, json_object, regexes and choices
via structured_outputs, checked by ajv and JavaScript's RegExp), and through gRPC: beams and
samples under a constraint, GBNF grammars checked by an independent recognizer (Python's `re`
for a regular grammar, a hand-written parser for a recursive one), jump-forward counted in
usage.forced_tokens, and bad constraints refused naming the field before any work. Run:
  test_structured.py --kvserve build/server/kvserve --make-model build/model/kvserve-make-model \
      --kvctl build/client/kvctl
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
PATHS = {}
TIMEOUT_S = 120 * TIME_SCALE
ARCHS = ("llama", "gemma3")

# A regular grammar and the same language as a Python regex (the independent recognizer).
DATE_GBNF = r'''
root ::= date " " time
date ::= year "-" month "-" day
year ::= [12] [0-9] [0-9] [0-9]
month ::= "0" [1-9] | "1" [0-2]
day ::= [0-2] [0-9] | "3" [01]
time ::= [01] [0-9] ":" [0-5] [0-9]
'''
DATE_RE = re.compile(r"[12][0-9]{3}-(0[1-9]|1[0-2])-([0-2][0-9]|3[01]) [01][0-9]:[0-5][0-9]")

# A recursive grammar: nested lists of small numbers.
LIST_GBNF = r'''
root ::= list
list ::= "[" ( item ( "," item )* )? "]"
item ::= [0-9] | list
'''


def parse_list(text):
    """Whether `text` is exactly a LIST_GBNF string (a recursive-descent recognizer)."""
    pos = 0

    def item():
        nonlocal pos
        if pos < len(text) and text[pos].isdigit():
            pos += 1
            return True
        return lst()

    def lst():
        nonlocal pos
        if pos >= len(text) or text[pos] != "[":
            return False
        pos += 1
        if pos < len(text) and text[pos] == "]":
            pos += 1
            return True
        if not item():
            return False
        while pos < len(text) and text[pos] == ",":
            pos += 1
            if not item():
                return False
        if pos >= len(text) or text[pos] != "]":
            return False
        pos += 1
        return True

    return lst() and pos == len(text)


class StructuredTest(unittest.TestCase):
    servers = {}
    workdir = ""

    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="kvserve-structured-")
        for arch in ARCHS:
            model = os.path.join(cls.workdir, arch)
            subprocess.run([PATHS["make_model"], "--arch", arch, "--preset", "tiny", "--out",
                            model], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            server = KvserveProcess(PATHS["kvserve"], ["--model", model, "--threads", "1",
                                                       "--http-listen", "127.0.0.1:0"])
            cls.servers[arch] = server

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers.values():
            server.stop()
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def generate(self, arch, constraint, **sampling):
        stub = gen_grpc.GenerationStub(self.servers[arch].channel())
        request = gen.GenerateRequest(prompt="Hello", constraint=constraint,
                                      sampling=gen.SamplingParams(**sampling))
        return stub.Generate(request, timeout=TIMEOUT_S)

    def texts(self, response):
        """The complete (not length-cut) sequences of a response."""
        if response.sequences:
            return [s.text for s in response.sequences
                    if s.finish_reason != gen.FINISH_REASON_LENGTH]
        return [response.text] if response.finish_reason != gen.FINISH_REASON_LENGTH else []

    def test_openai_client_outputs_validate(self):
        node = shutil.which("node")
        needed = [os.path.join(SOURCE, "tests", "openai", "node_modules", "openai"),
                  os.path.join(SOURCE, "tests", "constraint", "validator", "node_modules", "ajv")]
        if node is None or not all(os.path.isdir(p) for p in needed):
            self.skipTest("Node.js, openai or ajv (make setup) is missing")
        corpus_path = os.path.join(self.workdir, "corpus.json")
        with open(os.path.join(SOURCE, "tests", "constraint", "schemas.json"),
                  encoding="utf-8") as f:
            schemas = json.load(f)["schemas"]
        regexes = [r"[a-z]{3,8}", r"(yes|no|maybe)", r"\d{3}-\d{4}", r"[A-Z][a-z]+ [A-Z][a-z]+",
                   r"(0|[1-9][0-9]*)\.[0-9]{2}", r"https?://[a-z]+\.(com|org)/[a-z]*",
                   r"[a-f0-9]{8}-[a-f0-9]{4}", r"(ab|cd)+e?", r"\w+@\w+\.com", r"#[0-9A-F]{6}"]
        with open(corpus_path, "w", encoding="utf-8") as f:
            json.dump({"schemas": schemas, "regexes": regexes}, f)
        for arch in ARCHS:
            server = self.servers[arch]
            env = dict(os.environ, KVSERVE_BASE_URL=f"http://127.0.0.1:{server.http_port}/v1",
                       KVSERVE_MODEL=arch)
            done = subprocess.run([node, os.path.join(HERE, "structured_checks.mjs"),
                                   corpus_path, "3"], env=env, capture_output=True, text=True,
                                  timeout=600 * TIME_SCALE, check=False)
            print(f"[{arch}]\n{done.stdout}", end="", file=sys.stderr)
            self.assertEqual(done.returncode, 0, done.stderr + "\n" + server.log_tail())
            checked = int(re.search(r"checked (\d+) outputs", done.stdout).group(1))
            self.assertGreaterEqual(checked, 200, done.stdout)

    def test_beams_and_samples_follow_the_constraint(self):
        schema = {"type": "object", "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 999},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]},
                     "maxItems": 3}},
            "required": ["id", "tags"], "additionalProperties": False}
        for arch in ARCHS:
            c = gen.Constraint(json_schema=json.dumps(schema))
            beams = self.generate(arch, c, max_new_tokens=48, num_beams=4, num_return_sequences=4)
            samples = self.generate(arch, c, max_new_tokens=48, do_sample=True, temperature=1.0,
                                    seed=5, num_return_sequences=4)
            for response in (beams, samples):
                texts = self.texts(response)
                self.assertTrue(texts, response)
                for text in texts:
                    value = json.loads(text)
                    self.assertEqual(sorted(value), ["id", "tags"], text)
                    self.assertTrue(0 <= value["id"] <= 999, text)
                    self.assertTrue(set(value["tags"]) <= {"a", "b", "c"}, text)
            # Choices with beams: each returned beam is one of them.
            choice = gen.Constraint(choice=gen.Constraint.Choice(choices=["alpha", "beta", "gamma"]))
            beams = self.generate(arch, choice, max_new_tokens=8, num_beams=4,
                                  num_return_sequences=2)
            for text in self.texts(beams):
                self.assertIn(text, ["alpha", "beta", "gamma"])

    def test_grammars_checked_by_independent_recognizers(self):
        lists = 0
        for arch in ARCHS:
            dates = 0
            for seed in range(30):
                r = self.generate(arch, gen.Constraint(grammar=DATE_GBNF), max_new_tokens=40,
                                  do_sample=True, temperature=1.0, seed=seed)
                for text in self.texts(r):
                    self.assertTrue(DATE_RE.fullmatch(text), repr(text))
                    dates += 1
                r = self.generate(arch, gen.Constraint(grammar=LIST_GBNF), max_new_tokens=120,
                                  do_sample=True, temperature=1.0, seed=seed)
                for text in self.texts(r):
                    self.assertTrue(parse_list(text), repr(text))
                    lists += 1
            self.assertGreater(dates, 20, arch)
        # A random model may nest far more readily than it closes (tiny gemma3 opens lists
        # until max_new_tokens): fewer lists end in time, but each one that does is checked.
        self.assertGreater(lists, 10)

    def test_jump_forward_forces_the_fixed_parts(self):
        schema = {"type": "object", "properties": {
            "first_name": {"type": "string", "maxLength": 4},
            "last_name": {"type": "string", "maxLength": 4},
            "verified": {"type": "boolean"}},
            "required": ["first_name", "last_name", "verified"], "additionalProperties": False}
        r = self.generate("llama", gen.Constraint(json_schema=json.dumps(schema)),
                          max_new_tokens=80)
        value = json.loads(r.text)
        self.assertEqual(sorted(value), ["first_name", "last_name", "verified"])
        # The keys and punctuation are fixed: the constraint forces them.
        self.assertGreater(r.usage.forced_tokens, 5, r.usage)
        self.assertLess(r.usage.forced_tokens, r.usage.completion_tokens)

    def test_kvctl_constraint_flags(self):
        target = self.servers["llama"].target
        schema = os.path.join(self.workdir, "flag-schema.json")
        with open(schema, "w", encoding="utf-8") as f:
            json.dump({"type": "object", "properties": {"ok": {"type": "boolean"}},
                       "required": ["ok"], "additionalProperties": False}, f)

        def kvctl(*flags):
            return subprocess.run([PATHS["kvctl"], "generate", "--target", target, "--prompt",
                                   "Hi", "--max-new-tokens", "16", *flags],
                                  capture_output=True, text=True, timeout=TIMEOUT_S, check=False)

        done = kvctl("--choice", "up", "--choice", "down")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(done.stdout.strip().splitlines()[0], ("up", "down"), done.stdout)
        done = kvctl("--json-schema", schema)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(json.loads(done.stdout.strip().splitlines()[0]), ({"ok": True}, {"ok": False}))
        done = kvctl("--regex", "[0-9]{3}")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stdout.strip().splitlines()[0], r"^[0-9]{3}$")
        done = kvctl("--regex", "a", "--choice", "b")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("only one of", done.stderr)
        done = kvctl("--regex", "(a")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("constraint.regex", done.stderr)

    def test_the_python_example_runs(self):
        example = os.path.join(SOURCE, "client", "python", "kvserve_structured_example.py")
        done = subprocess.run([sys.executable, example, "--target", self.servers["llama"].target],
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("forced by the constraint", done.stdout)

    def test_bad_constraints_are_refused_naming_the_field(self):
        cases = [
            (gen.Constraint(json_schema="{not json"), "constraint.json_schema"),
            (gen.Constraint(json_schema=json.dumps({"type": "object", "properties": {
                "a": {"type": "string", "contentEncoding": "base64"}}})),
             "/properties/a"),
            (gen.Constraint(json_schema=json.dumps({"$ref": "#/$defs/missing"})), "missing"),
            (gen.Constraint(regex="(ab"), "constraint.regex"),
            (gen.Constraint(grammar="root ::= root \"a\" | \"b\""), "left"),
            (gen.Constraint(grammar="root ::= undefined"), "constraint.grammar"),
            (gen.Constraint(choice=gen.Constraint.Choice()), "constraint.choice"),
            (gen.Constraint(), "constraint"),
            (gen.Constraint(json_object=True, whitespace_bytes=1000), "whitespace_bytes"),
        ]
        for constraint, needle in cases:
            with self.assertRaises(grpc.RpcError) as caught:
                self.generate("llama", constraint, max_new_tokens=4)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(needle, caught.exception.details())
        # The server is unharmed.
        r = self.generate("llama", gen.Constraint(choice=gen.Constraint.Choice(choices=["ok"])),
                          max_new_tokens=4)
        self.assertEqual(r.text, "ok")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--make-model", required=True)
    parser.add_argument("--kvctl", required=True)
    args, rest = parser.parse_known_args()
    PATHS.update(kvserve=args.kvserve, make_model=args.make_model, kvctl=args.kvctl)
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
