"""The documentation: the README stays short and every relative link of the README and the pages
resolves in the repository; mkdocs.yml's nav holds every page and the API pages every public name
(quick: no fit, no browser). Slow: the site built with `mkdocs build --strict`, read in headless
Chromium (Debian's: tensorboard_server.headless_chromium): the API pages render XlaMonitor,
apply_fix and parse_report with their docstrings, and no page of the nav is a stub."""

import ast
import functools
import http.server
import importlib.util
import os
import re
import subprocess
import sys
import threading
import unicodedata

import pytest
from tensorboard_server import headless_chromium

pytestmark = pytest.mark.xdist_group("test_docs_site")  # its module fixtures' runs happen once, on one worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
README = os.path.join(ROOT, "README.md")
README_MAX_LINES = 250

# The documentation site's pages, each with the README's content moved in (file: what it holds).
REQUIRED_PAGES = {
    "getting-started.md": "getting started",
    "storms.md": "storms and fixes",
    "jit-modes.md": "JIT modes and fastest",
    "tensorboard.md": "the TensorBoard tab",
    "jax.md": "Keras's JAX backend",
    "distribution.md": "distribution",
    "cold-start.md": "cold start",
    "cli.md": "the command line",
    "report-schema.md": "the report schema",
    "benchmarks.md": "benchmarks",
    "supported-stacks.md": "supported stacks",
    "limitations.md": "limitations",
    "architecture.md": "the architecture document",
}
MIN_PAGE_TEXT = 400  # characters of text in a page's main content: less is a stub


# ------------------------------------------------------------------ markdown, read plainly


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _prose(text):
    """The markdown without fenced code blocks and inline code: links in code are not links."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def _links(path):
    """Every [text](target) and ![alt](target) of a markdown file, as (line, target)."""
    text = _prose(_read(path))
    found = []
    for match in re.finditer(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def _slug(heading):
    """A heading's anchor as both GitHub and MkDocs (Python-Markdown's toc) spell it for these
    pages' headings: code marks, punctuation and symbols dropped, spaces and hyphens as one '-'."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@functools.cache
def _anchors(path):
    text = _read(path)
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M)}


def _markdown_files():
    files = [README]
    for folder, _, names in os.walk(DOCS):
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return files


def _doc_pages():
    """Every docs/**/*.md, relative to docs/ with '/' separators."""
    return sorted(os.path.relpath(p, DOCS).replace(os.sep, "/") for p in _markdown_files()[1:])


def _nav_pages():
    yaml = pytest.importorskip("yaml", reason="PyYAML reads mkdocs.yml (MkDocs brings it: the docs extra)")
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)

    def walk(items):
        for item in items:
            if isinstance(item, str):
                yield item
            elif isinstance(item, dict):
                for value in item.values():
                    yield from walk(value) if isinstance(value, list) else [value]

    return list(walk(config["nav"]))


# ------------------------------------------------------------------ quick


def test_the_readme_is_at_most_250_lines():
    with open(README, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_every_relative_link_of_the_readme_and_the_pages_resolves_in_the_repository():
    broken = []
    for path in _markdown_files():
        where = os.path.relpath(path, ROOT)
        for line, target in _links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not resolved.startswith(ROOT + os.sep) or not os.path.exists(resolved):
                broken.append(f"{where}:{line}: {target} (no such file in the repository)")
            elif anchor and resolved.endswith(".md") and anchor not in _anchors(resolved):
                broken.append(f"{where}:{line}: {target} (no heading #{anchor} there)")
    assert not broken, "\n".join(broken)


def test_the_link_reader_finds_links_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A `code` title: here\n\nSee [a](a.md#x), ![img](b.png) and [c](https://e.org).\n"
        "`[not](a link)`\n\n```\n[not](either.md)\n```\n[d [e]](f.md)\n"
    )
    assert [t for _, t in _links(str(page))] == ["a.md#x", "b.png", "https://e.org", "f.md"]
    assert _anchors(str(page)) == {"a-code-title-here"}
    heading = 'Does XLA help my model? `jit="fastest"` measures it'
    assert _slug(heading) == "does-xla-help-my-model-jitfastest-measures-it"


def test_the_nav_lists_every_required_page_and_every_page_of_docs():
    nav = _nav_pages()
    missing = sorted(set(REQUIRED_PAGES) - set(nav))
    assert not missing, f"mkdocs.yml's nav lacks the pages {missing}"
    absent = sorted(set(_doc_pages()) - set(nav))
    assert not absent, f"docs/ pages not in mkdocs.yml's nav: {absent}"
    gone = sorted(p for p in nav if not os.path.exists(os.path.join(DOCS, p)))
    assert not gone, f"mkdocs.yml's nav names pages that do not exist: {gone}"
    assert len(nav) == len(set(nav)), "a page is twice in the nav"


def _api_directives():
    """{object path: api page} for every `::: path` of docs/api/*.md."""
    found = {}
    for page in _doc_pages():
        if page.startswith("api/"):
            for match in re.finditer(r"^:::\s+(\S+)", _read(os.path.join(DOCS, page)), flags=re.M):
                found[match.group(1)] = page
    return found


def _public_names(module_file):
    """A module's __all__, read from its source (nothing imported)."""
    for node in ast.parse(_read(module_file)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no __all__ in {module_file}")


def _lazy_table():
    for node in ast.parse(_read(os.path.join(ROOT, "xla_keras", "__init__.py"))).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("no _LAZY in xla_keras/__init__.py")


def test_the_api_pages_cover_every_public_name_at_its_defining_module():
    """mkdocstrings cannot follow the package's lazy __getattr__: each name is documented where
    _LAZY says it is defined."""
    directives = _api_directives()
    lazy = _lazy_table()
    expected = {}
    for name in _public_names(os.path.join(ROOT, "xla_keras", "__init__.py")):
        if name in ("data", "testing"):  # the public modules
            expected[name] = f"xla_keras.{name}"
        elif name == "__version__":
            expected[name] = "xla_keras.__version__"
        else:
            expected[name] = f"xla_keras.{lazy[name]}.{name}"
    for name in _public_names(os.path.join(ROOT, "xla_keras", "data", "__init__.py")):
        expected[f"data.{name}"] = f"xla_keras.data.{name}"  # defined there, or imported there (APPLIED_KINDS)
    missing = {name: path for name, path in expected.items() if path not in directives}
    assert not missing, f"public names without an API entry (`::: path` in docs/api/*.md): {missing}"


# ------------------------------------------------------------------ slow: the built site in Chromium


def _missing_docs_tools():
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ModuleNotFoundError:
            return module
    return None


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    missing = _missing_docs_tools()
    if missing:
        pytest.skip(f"{missing} is not installed: the docs extra is (pip install -e '.[docs]')")
    built = os.environ.get("XLA_KERAS_DOCS_SITE")  # scripts/test.sh's static check built it, strict, just before
    if built and os.path.exists(os.path.join(built, "index.html")):
        return built
    site = tmp_path_factory.mktemp("docs_site") / "site"
    had_site = os.path.exists(os.path.join(ROOT, "site"))
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    assert had_site or not os.path.exists(os.path.join(ROOT, "site")), "the build wrote site/ into the checkout"
    return site


@pytest.fixture(scope="module")
def site_server(built_site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(built_site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _html_page(page):
    return page[: -len(".md")] + ".html"  # mkdocs.yml: use_directory_urls: false


def _plain(text):
    """Docstring markdown as the page shows it: no code marks or emphasis, one space between words."""
    return " ".join(re.sub(r"[`*]", "", text).split())


def _docstring(path):
    """An object's docstring, read from its module's source (importing xla_keras.monitor would
    import Keras and its backend: seconds)."""
    module, _, name = path.rpartition(".")
    source = os.path.join(ROOT, *module.split(".")) + ".py"
    if not os.path.exists(source):
        source = os.path.join(ROOT, *module.split("."), "__init__.py")
    for node in ast.parse(_read(source)).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return ast.get_docstring(node) or ""
    raise AssertionError(f"{name} is not defined in {source}")


def _documented_args(doc):
    """The parameter names of a Google-style docstring's Args: section."""
    section = re.search(r"^Args:\n((?:[ \t]+.*\n?|\n)+)", doc, flags=re.M)
    if not section:
        return []
    return re.findall(r"^ {4}(\*{0,2}\w+)(?: \([^)]*\))?:", section.group(1), flags=re.M)


API_OBJECTS = {
    "xla_keras.monitor.XlaMonitor": ("api/monitor.md", True),
    "xla_keras.data.apply_fix": ("api/data.md", True),
    "xla_keras.report.schema.parse_report": ("api/report.md", True),
}
# Members a user reads, shown under their class (XlaMonitor's live in its base: inherited_members).
API_MEMBERS = {"api/monitor.md": ["xla_keras.monitor.XlaMonitor.report", "xla_keras.monitor.XlaMonitor.reports"]}


@pytest.mark.slow
def test_the_built_site_renders_the_api_and_no_page_is_a_stub(site_server):
    from playwright.sync_api import sync_playwright

    stubs = []
    with sync_playwright() as p:
        browser = headless_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for doc_page in _nav_pages():
                response = page.goto(site_server + _html_page(doc_page), wait_until="load")
                assert response is not None and response.ok, doc_page
                article = page.locator("article.md-content__inner")
                text = " ".join(article.inner_text().split())
                headings = article.locator("h1, h2").count()
                if len(text) < MIN_PAGE_TEXT or headings == 0:
                    stubs.append(f"{doc_page}: {len(text)} characters, {headings} headings")
            assert not stubs, f"stub pages (under {MIN_PAGE_TEXT} characters or no heading): {stubs}"

            for path, (doc_page, must_have_args) in API_OBJECTS.items():
                page.goto(site_server + _html_page(doc_page), wait_until="load")
                name = path.rpartition(".")[2]
                heading = page.locator(f"[id='{path}']")
                assert heading.count() == 1, f"{path}: no heading on {doc_page}"
                assert heading.evaluate("e => e.tagName") in ("H2", "H3"), path
                assert name in heading.inner_text(), path
                contents = page.locator(f"div.doc-object:has(> [id='{path}']) > div.doc-contents").first
                shown = " ".join(contents.inner_text().split())
                doc = _docstring(path)
                summary = _plain(doc.split("\n\n")[0])
                assert summary in shown, f"{path}: its docstring's summary is not on {doc_page}: {summary!r}"
                args = _documented_args(doc)
                assert args or not must_have_args, f"{path}: its docstring has no Args: section"
                if args:
                    table = contents.locator("table").first
                    assert "Parameters" in shown and table.count() == 1, f"{path}: no Parameters table"
                    rows = " ".join(table.inner_text().split())
                    absent = [a for a in args if a.strip("*") not in rows]
                    assert not absent, f"{path}: parameters missing from its table: {absent}"
            for doc_page, members in API_MEMBERS.items():
                page.goto(site_server + _html_page(doc_page), wait_until="load")
                missing = [m for m in members if page.locator(f"[id='{m}']").count() != 1]
                assert not missing, f"{doc_page}: no heading for {missing}"
        finally:
            browser.close()
