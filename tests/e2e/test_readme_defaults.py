#!/usr/bin/python3
"""Every default the documentation states, checked against the code.

The documentation is README.md and docs/*.md (issue 46 moved all but the front page to docs/);
each file is read on its own (line numbers, prose), its tables together. It states defaults in
three tables (a table may be split in several, under one header; a flag or field in two rows
fails) and in prose:
- the kvserve flag table, in docs/flags.md only: each row's default is what `kvserve --help`
  prints as "(default: X)" (a switch, which --help shows without one, is "off"), and every flag
  --help lists has a row;
- the kvctl global flag table, against `kvctl --help`'s global flags, both ways;
- the API field table: each field's default (its first code span) is what the field's comment
  in proto/kvserve/v1/*.proto says after "unset:" or "empty:", what `kvctl COMMAND --help`
  prints for the flag named beside it ("(default: server: X)"), and, for the fields a running
  server shows cheaply, what it answers: a prefix registered without options, a generation
  without sampling or cache options, a session created without options, GetModelInfo;
- prose, in three shapes: `NAME` (... default V), `NAME`, default V, and `--flag V` (default) or
  `--flag V`, the default; NAME is a flag (kvserve's, else kvctl's global ones; in the
  kvserve-generate row of the tools table, kvserve-generate's) or an API field of the table
  (`Message.field`, or `field` when one row ends with it). V matches the flag's or field's
  default whole, or the part before its first ": " ("0" for "0: follows the device ...").
Any other "default" in these files must be one of the phrases of NOT_DEFAULT_STATEMENTS, which
state no default of kvserve, kvctl or the API: a new statement of a default cannot go unchecked.
Every relative link in them, ARCHITECTURE.md, DEVELOPERS.md and the READMEs of client/python,
server/vllm_api and bench must name a file that exists and, with "#anchor", a heading of it:
the pages moved, their links must not dangle.

Needs ctest's PYTHONPATH (scripts/python.sh sets it); run:
  test_readme_defaults.py --readme README.md --docs-dir docs --proto-dir proto/kvserve/v1 \\
      --kvserve build/server/kvserve --kvctl build/client/kvctl \\
      --generate build/model/kvserve-generate
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    health_pb2,
    health_pb2_grpc,
    prefix_pb2,
    prefix_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
)
from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position

ARGS = None
TIME_SCALE = float(os.environ.get("KVSERVE_TEST_TIME_SCALE", "1"))
STARTUP_TIMEOUT_S = 60 * TIME_SCALE
CALL_TIMEOUT_S = 60 * TIME_SCALE

# Phrases with "default" that state no default of a kvserve or kvctl flag or an API field (or
# point at a table that does), each a regular expression over one file's text (whitespace
# matching line breaks); each must occur in at least one of the files.
NOT_DEFAULT_STATEMENTS = [
    r"the embedded default model",                      # the model's name
    r"unset fields take Transformers' `generate\(\)` defaults",  # the API table follows
    r"kvserve is secure by default",                    # a property
    r"the image's default command",                     # the container image's command
    r"the tenant `default`",                            # a tenant's name
    r"\(`default` without API keys",                    # a tenant's name
    r"tenant=default",                                  # a tenant's name
    r"`length_penalty` are defaults too",               # generation_config.json's defaults
    r"Linux's default `transparent_hugepage=madvise`",  # the kernel's setting
    r"The default \(`--build-arg CUDNN=download`\)",    # the Dockerfile's build argument
    r"\(kvctl's default\)",                             # --route, in the kvctl table
    r"every request field's default",                   # the README's map: the API table
    r"Generation: fields, defaults, errors",            # the heading above the API table
]

FLAG_LINE = re.compile(r"^\s+--([a-z0-9-]+)\s")
CODE_SPAN = re.compile(r"`([^`]+)`")
# A flag (with an optional value or metavar inside the code span) or an API field.
NAME = r"`(--[a-z0-9-]+|[A-Z]\w*\.\w+|[a-z]+(?:_[a-z]+)+)(?: [^`]*)?`"
VALUE = r"(`[^`]+`|[^);]+)"
PROSE_SHAPES = [
    re.compile(NAME + r"\s*\(([^()]*?)\bdefault:?\s+" + VALUE),
    re.compile(NAME + r",\s+default:?\s+" + VALUE),
    re.compile(r"`(--[a-z0-9-]+) ([^`]+)`(?:\s+\(default\)|,\s+the\s+default\b)"),
]
PROTO_DEFAULT = re.compile(r"\b(?:0 or )?(?:unset|empty)( or false)?:\s*", re.IGNORECASE)


def norm(text):
    """A cell or value without code-span backticks, escapes and repeated whitespace."""
    return " ".join(text.replace("`", "").replace("\\|", "|").split())


def run_help(binary, *args):
    result = subprocess.run([binary, *args, "--help"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=CALL_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise AssertionError(f"{binary} {' '.join(args)} --help exited {result.returncode}:\n"
                             f"{result.stderr}")
    return result.stdout


def help_defaults(text, after=None):
    """{flag: default} from --help text (lines "  --name  help (default: X)"; None where a flag
    shows no default), from the line after `after` on when given."""
    lines = text.splitlines()
    if after is not None:
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith(after)) + 1:]
    flags = {}
    for line in lines:
        match = FLAG_LINE.match(line)
        if not match:
            continue
        at = line.rfind(" (default: ")
        flags[match.group(1)] = line[at + len(" (default: "):-1] if at >= 0 else None
    return flags


def split_row(line):
    cells = re.split(r"(?<!\\)\|", line.strip())
    return [cell.strip() for cell in cells[1:-1]]


def doc_tables(docs):
    """{first header cell: [("FILE:LINE", cells)]} of the tables of every (name, text) in
    `docs`; the rows of several tables under one header are one list, in file order."""
    tables = {}
    for name, text in docs:
        lines = text.splitlines()
        i = 0
        while i < len(lines):
            if (lines[i].startswith("|") and i + 1 < len(lines)
                    and lines[i + 1].startswith("|---")):
                rows = tables.setdefault(split_row(lines[i])[0], [])
                i += 2
                while i < len(lines) and lines[i].startswith("|"):
                    rows.append((f"{name}:{i + 1}", split_row(lines[i])))
                    i += 1
            else:
                i += 1
    return tables


def flag_rows(rows):
    """{flag: ("FILE:LINE", default cell)} of a flag table: a row naming several flags gives
    each its part of a comma-separated default when the counts agree, else the whole default.
    A flag with two rows is an AssertionError naming both."""
    flags = {}
    for where, cells in rows:
        names = [span.split()[0][2:] for span in CODE_SPAN.findall(cells[0])
                 if span.startswith("--")]
        parts = cells[1].split(", ")
        for i, name in enumerate(names):
            if name in flags:
                raise AssertionError(f"{where}: --{name} has a row already, at "
                                     f"{flags[name][0]}")
            flags[name] = (where, parts[i] if len(parts) == len(names) else cells[1])
    return flags


def heading_anchor(heading):
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped but hyphens
    and underscores, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", norm(heading).lower())
    return text.replace(" ", "-")


def file_anchors(path):
    """The anchors of a Markdown file's headings (outside code blocks)."""
    anchors, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                anchors.add(heading_anchor(line.lstrip("#").strip()))
    return anchors


def leading_value(cell):
    """The value a default cell states: its first code span, else the whole cell."""
    span = CODE_SPAN.search(cell)
    return span.group(1) if span else norm(cell)


def proto_field_comments(proto_dir):
    """{"Message.field": comment text} of every field of the .proto files in `proto_dir`."""
    fields = {}
    field_line = re.compile(r"^\s*(?:optional\s+|repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*;")
    for name in sorted(os.listdir(proto_dir)):
        if not name.endswith(".proto"):
            continue
        with open(os.path.join(proto_dir, name), encoding="utf-8") as f:
            lines = f.read().splitlines()
        stack = []  # message names; None for oneof and enum blocks
        comment = []
        for line in lines:
            stripped = line.strip()
            opened = re.match(r"(message|oneof|enum|service)\s+(\w+)\s*\{", stripped)
            if opened:
                stack.append(opened.group(2) if opened.group(1) == "message" else
                             (None if opened.group(1) == "oneof" else "-"))
                comment = []
                continue
            if stripped.startswith("}"):
                stack.pop()
                comment = []
                continue
            if stripped.startswith("//"):
                comment.append(stripped[2:].strip())
                continue
            match = field_line.match(line)
            messages = [m for m in stack if m is not None]
            if match and messages and messages[-1] != "-":
                fields[f"{messages[-1]}.{match.group(1)}"] = " ".join(comment)
            comment = []
    return fields


def proto_default(comment):
    """What a field comment says the field is when unset ("unset: X", "empty: X", "0 or unset:
    X", the last one; "unset or false: ..." is false), or None."""
    matches = list(PROTO_DEFAULT.finditer(comment))
    if not matches:
        return None
    last = matches[-1]
    if last.group(1):
        return "false"
    rest = comment[last.end():]
    if rest.startswith('"'):
        return rest[1:rest.index('"', 1)]
    value = re.match(r"(.*?)(?=[,;(]|\.(?:\s|$)|$)", rest).group(1).strip()
    return value.removeprefix("the server's ")


def matches_default(value, default):
    """Whether a prose value states `default`: all of it, or its part before the first ': '."""
    value, default = norm(value), norm(default)
    return value == default or value == default.split(": ")[0]


class ReadmeDefaultsTest(unittest.TestCase):
    """Reads the documentation and the --help texts once; the server checks start a kvserve."""

    @classmethod
    def setUpClass(cls):
        cls.docs = []  # (name as the messages show it, text): README.md, then docs/*.md
        paths = [ARGS.readme] + [os.path.join(ARGS.docs_dir, name)
                                 for name in sorted(os.listdir(ARGS.docs_dir))
                                 if name.endswith(".md")]
        for path in paths:
            with open(path, encoding="utf-8") as f:
                cls.docs.append((cls.doc_name(path), f.read()))
        cls.paths = dict(zip((name for name, _ in cls.docs), paths))
        cls.tables = doc_tables(cls.docs)
        cls.kvserve_help = help_defaults(run_help(ARGS.kvserve))
        cls.kvctl_help = help_defaults(run_help(ARGS.kvctl), after="global flags")
        cls.generate_help = help_defaults(run_help(ARGS.generate))
        cls.proto = proto_field_comments(ARGS.proto_dir)
        cls.api = {}  # "Message.field": ("FILE:LINE", default value, kvctl cell)
        for where, cells in cls.tables.get("API field", []):
            for field in CODE_SPAN.findall(cells[0]):
                if field in cls.api:
                    raise AssertionError(f"{where}: {field} has a row already, at "
                                         f"{cls.api[field][0]}")
                cls.api[field] = (where, leading_value(cells[2]), cells[1])

    @staticmethod
    def doc_name(path):
        """README.md or docs/NAME.md: the path from the README's folder."""
        root = os.path.dirname(os.path.abspath(ARGS.readme))
        return os.path.relpath(os.path.abspath(path), root)

    def test_reads_the_front_page_and_every_docs_page(self):
        names = [name for name, _ in self.docs]
        self.assertEqual(names[0], "README.md")
        # Issue 46: the front page stays a front page; the rest belongs in docs/.
        self.assertLessEqual(len(self.docs[0][1].splitlines()), 150,
                             "README.md is over 150 lines: move the detail to docs/")
        for page in ("flags", "grpc-api", "http-api", "prefixes", "sessions", "routers",
                     "tiers", "deployment", "performance", "models"):
            self.assertIn(f"docs/{page}.md", names)

    def table(self, header):
        self.assertIn(header, self.tables, f"no file has a table headed '{header}'")
        return self.tables[header]

    def check_flag_table(self, header, help_flags, program):
        rows = flag_rows(self.table(header))
        for flag, (where, cell) in rows.items():
            with self.subTest(flag=flag):
                self.assertIn(flag, help_flags, f"{where}: --{flag} is not a flag of {program}")
                shown = help_flags[flag]
                self.assertEqual(norm(cell), "off" if shown is None else norm(shown),
                                 f"{where}: the default of --{flag} disagrees with "
                                 f"`{program} --help`")
        self.assertEqual(sorted(set(help_flags) - set(rows)), [],
                         f"flags of `{program} --help` without a row in a table headed "
                         f"'{header}'")
        return rows

    def test_kvserve_flag_table_matches_help(self):
        rows = self.check_flag_table("kvserve flag", self.kvserve_help, "kvserve")
        # docs/flags.md is the one flag reference: no kvserve flag table elsewhere.
        elsewhere = sorted({where.split(":")[0] for where, _ in rows.values()} -
                           {"docs/flags.md"})
        self.assertEqual(elsewhere, [], "kvserve flag tables outside docs/flags.md")

    def test_kvctl_global_flag_table_matches_help(self):
        self.check_flag_table("kvctl global flag", self.kvctl_help, "kvctl")

    def test_api_table_matches_proto_comments(self):
        self.assertIn("PrefixOptions.cache_implementation", self.api)
        for field, (where, value, _) in self.api.items():
            with self.subTest(field=field):
                self.assertIn(field, self.proto, f"{where}: no field {field} in "
                              f"{ARGS.proto_dir}")
                stated = proto_default(self.proto[field])
                self.assertIsNotNone(stated, f"the comment of {field} states no default "
                                     f"('unset: X' or 'empty: X'): {self.proto[field]!r}")
                self.assertEqual(norm(value), stated,
                                 f"{where}: the default of {field} disagrees with "
                                 f"its proto comment {self.proto[field]!r}")

    def test_api_table_matches_kvctl_help(self):
        helps = {}
        for field, (where, value, cell) in self.api.items():
            words = norm(cell).split()
            if not words:
                continue
            command = tuple(w for w in words if not w.startswith("--"))
            flags = [w[2:] for w in words if w.startswith("--")]
            if command not in helps:
                helps[command] = help_defaults(run_help(ARGS.kvctl, *command))
            for flag in flags:
                with self.subTest(field=field, flag=flag):
                    shown = helps[command].get(flag, "missing")
                    self.assertNotEqual(shown, "missing", f"{where}: `kvctl "
                                        f"{' '.join(command)}` has no --{flag}")
                    if shown is not None and shown.startswith("server: "):
                        self.assertEqual(norm(value), norm(shown[len("server: "):]),
                                         f"{where}: the default of {field} disagrees "
                                         f"with `kvctl {' '.join(command)} --help`'s --{flag}")

    def expected_for(self, name, line_text):
        """The default of a flag or field named in prose, or None when the tables and the
        --help texts know no such name."""
        if name.startswith("--"):
            flag = name[2:]
            if line_text.startswith("| `build/model/kvserve-generate`"):
                return self.generate_help.get(flag)
            if flag in self.kvserve_help:
                return self.kvserve_help[flag] or "off"
            return self.kvctl_help.get(flag)
        if "." in name:
            return self.api[name][1] if name in self.api else None
        fields = [f for f in self.api if f.endswith("." + name)]
        return self.api[fields[0]][1] if len(fields) == 1 else None

    def test_prose_defaults_and_every_default_is_checked(self):
        checked = []
        phrases_found = {phrase: False for phrase in NOT_DEFAULT_STATEMENTS}
        for doc, text in self.docs:
            with self.subTest(file=doc):
                self.check_prose(doc, text, checked, phrases_found)
        for phrase, found in phrases_found.items():
            self.assertTrue(found, f"NOT_DEFAULT_STATEMENTS: {phrase!r} is in no file any "
                            "more; remove it")
        # The statements issue 27 was about must be among the checked ones.
        for name in ("PrefixOptions.cache_implementation", "--auto-prefix-min-tokens"):
            self.assertIn(name, checked)

    def check_prose(self, doc, text, checked, phrases_found):
        covered = []  # spans of "default" that a table, a checked shape or the allow list covers
        offset = 0
        for line in text.splitlines(keepends=True):
            if line.startswith("|") and split_row(line)[:1] in (
                    ["kvserve flag"], ["kvctl global flag"], ["API field"]):
                covered.append((offset, offset + len(line)))
            offset += len(line)
        for shape in PROSE_SHAPES:
            for match in shape.finditer(text):
                line_no = text.count("\n", 0, match.start()) + 1
                line_text = text.splitlines()[line_no - 1]
                name = match.group(1)
                value = match.group(match.lastindex)
                if value.startswith("`"):
                    value = value[1:-1]
                checked.append(name)
                with self.subTest(line=f"{doc}:{line_no}", name=name):
                    expected = self.expected_for(name, line_text)
                    self.assertIsNotNone(expected, f"{doc}:{line_no}: states a default of "
                                         f"{name}, which no table or --help knows")
                    self.assertTrue(matches_default(value, expected),
                                    f"{doc}:{line_no}: states the default of {name} as "
                                    f"{norm(value)!r}, but it is {expected!r}")
                covered.append(match.span())
        for phrase in NOT_DEFAULT_STATEMENTS:
            pattern = re.compile(phrase.replace(" ", r"\s+"))
            spans = [m.span() for m in pattern.finditer(text)]
            phrases_found[phrase] = phrases_found[phrase] or bool(spans)
            covered.extend(spans)
        for match in re.finditer(r"\bdefaults?\b", text, re.IGNORECASE):
            if any(start <= match.start() < end for start, end in covered):
                continue
            line_no = text.count("\n", 0, match.start()) + 1
            self.fail(f"{doc}:{line_no}: '{text.splitlines()[line_no - 1].strip()}' states "
                      "a default this test does not check: write it in a table or as `NAME` "
                      "(default V), or add the phrase to NOT_DEFAULT_STATEMENTS when it states "
                      "no default of kvserve, kvctl or the API")

    def test_relative_links_resolve(self):
        link = re.compile(r"\]\(([^()\s]+)\)")
        docs, paths = list(self.docs), dict(self.paths)
        root = os.path.dirname(os.path.abspath(ARGS.readme))
        for extra in ("ARCHITECTURE.md", "DEVELOPERS.md", "client/python/README.md",
                      "server/vllm_api/README.md", "bench/README.md"):
            path = os.path.join(root, extra)
            self.assertTrue(os.path.exists(path), f"{extra} is missing")
            with open(path, encoding="utf-8") as f:
                docs.append((extra, f.read()))
            paths[extra] = path
        for doc, text in docs:
            folder = os.path.dirname(paths[doc])
            fenced = False
            for line_no, line in enumerate(text.splitlines(), 1):
                if line.startswith("```"):
                    fenced = not fenced
                if fenced:
                    continue
                for target in link.findall(line):
                    if re.match(r"[a-z]+:", target):
                        continue  # http:, https:, mailto:
                    path, _, anchor = target.partition("#")
                    path = os.path.normpath(os.path.join(folder, path)) if path else \
                        paths[doc]
                    with self.subTest(link=f"{doc}:{line_no}: {target}"):
                        self.assertTrue(os.path.exists(path),
                                        f"{doc}:{line_no}: {target} names no file")
                        if anchor and path.endswith(".md"):
                            self.assertIn(anchor, file_anchors(path),
                                          f"{doc}:{line_no}: {target}: no such heading")

    def test_running_server_answers_the_stated_defaults(self):
        kvserve_table = flag_rows(self.table("kvserve flag"))
        # wait=False: check_server watches health go to SERVING itself.
        server = KvserveProcess(ARGS.kvserve, ["--threads", "1"], wait=False,
                                start_timeout_s=STARTUP_TIMEOUT_S)
        try:
            self.check_server(server.channel(), server.port, kvserve_table)
        finally:
            server.kill()

    def check_server(self, channel, port, kvserve_table):
        # Health is NOT_SERVING while the model warms up: Watch streams each change.
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(),
                                                          timeout=STARTUP_TIMEOUT_S)
        for answer in watch:
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                break
        watch.cancel()
        api = {field: value for field, (_, value, _) in self.api.items()}

        generation = gen_grpc.GenerationStub(channel)
        info = generation.GetModelInfo(gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)
        self.assertEqual(str(info.max_new_tokens_limit),
                         norm(kvserve_table["max-new-tokens-limit"][1]))
        self.assertEqual(info.device, norm(kvserve_table["device"][1]))
        self.assertEqual(info.dtype, norm(kvserve_table["dtype"][1]))
        self.assertEqual(info.replica_id, f"127.0.0.1:{port}")  # the HOST:PORT it listens on

        # No sampling and no cache options, past end-of-sequence tokens.
        response = generation.Generate(
            gen.GenerateRequest(prompt="Hello", sampling=gen.SamplingParams(ignore_eos=True)),
            timeout=CALL_TIMEOUT_S)
        self.assertEqual(str(response.usage.completion_tokens),
                         api["SamplingParams.max_new_tokens"])
        self.assertEqual(response.cache_report.cache_implementation,
                         api["CacheOptions.cache_implementation"])

        prefixes = prefix_pb2_grpc.PrefixCacheStub(channel)
        registered = prefixes.RegisterPrefix(
            prefix_pb2.RegisterPrefixRequest(name="readme-defaults", text="You are terse."),
            timeout=CALL_TIMEOUT_S)
        got = prefixes.GetPrefix(prefix_pb2.GetPrefixRequest(name="readme-defaults"),
                                 timeout=CALL_TIMEOUT_S)
        for prefix in (registered, got):
            self.assertEqual(prefix.options.cache_implementation,
                             api["PrefixOptions.cache_implementation"])
            self.assertEqual(str(prefix.options.pinned).lower(), api["PrefixOptions.pinned"])
            self.assertEqual(prefix.options.retention, api["PrefixOptions.retention"])
            self.assertEqual(api["PrefixOptions.ttl_seconds"], "never")
            self.assertEqual(prefix.options.ttl_seconds, 0)

        sessions = session_pb2_grpc.SessionsStub(channel)
        session = sessions.CreateSession(session_pb2.CreateSessionRequest(),
                                         timeout=CALL_TIMEOUT_S)
        self.assertEqual(api["SessionOptions.ttl_seconds"], "--session-ttl-seconds")
        self.assertEqual(str(session.options.ttl_seconds),
                         norm(kvserve_table["session-ttl-seconds"][1]))
        self.assertIn(session.options.cache.cache_implementation,
                      ("", api["SessionOptions.cache"]))
        sessions.CloseSession(session_pb2.CloseSessionRequest(id=session.id),
                              timeout=CALL_TIMEOUT_S)


def main():
    global ARGS  # pylint: disable=global-statement
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", required=True, help="README.md")
    parser.add_argument("--docs-dir", required=True, help="docs/, whose *.md files are read")
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--kvctl", required=True)
    parser.add_argument("--generate", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
