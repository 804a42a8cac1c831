"""Code files as their definitions: a code file's sections are its classes, functions and methods,
nested, each with its lines; a hit names the definition, get_document(heading=...) returns it; a
code file's title is its docstring or first comment, never code or a licence; hostile code costs
one pass and is never an error."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import code_outline
from documents import MAX_OUTLINE_HEADINGS, document_reply
from index_writer import IndexWriter
from indexer import TextIndexer
from models import ServerConfig
import search as search_module
from search import search
from sections import sections, text_content
from tests.conftest import write

ADAPTERS = '''\
#!/usr/bin/env python
# Copyright 2019 Kenneth Reitz. Licensed under the Apache License.
"""Transport adapters that keep connections to hosts.

Longer text.
"""
import os


class BaseAdapter:
    """The base."""

    def close(self):
        pass


class HTTPAdapter(BaseAdapter):
    """Pools connections."""

    def __init__(self, retries=3):
        self.retries = retries

    @property
    def pool(self):
        return None

    def send(self, request):
        """Sends a prepared request over a pooled connection, walrus."""
        conn = self.pool
        return conn.urlopen(request)


def helper():
    return 1
'''

ROUTER_GO = '''\
// Copyright 2016 The Gorilla Authors. All rights reserved.
// Use of this source code is governed by a BSD-style license.

// Package mux implements a request router and dispatcher.
package mux

type Router struct {
	routes []*Route
}

func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.match(req) {
		narwhal(w)
	}
}

func NewRouter() *Router {
	return &Router{}
}
'''

APP_JS = '''\
/*!
 * express
 * Copyright(c) 2009-2013 TJ Holowaychuk
 * MIT Licensed
 */

'use strict';

/**
 * Module dependencies.
 */
var http = require('http');

app.listen = function listen() {
  var server = http.createServer(this);
  return server.listen.apply(server, arguments);
};

class Router {
  constructor(options) {
    this.stack = [];
  }

  handle(req, res, out) {
    if (req.url) {
      dispatchOstrich(req);
    }
  }
}
'''


def outline_of(name: str, text: str) -> tuple[list[tuple[int, str]], str]:
    """(level, heading) of each definition in a code text, and its title."""
    content = text_content(text, name)
    return [(level, heading) for _, level, heading in content.headings], content.title


def test_python_definitions_are_nested_headings_and_docstring_is_title() -> None:
    headings, title = outline_of("adapters.py", ADAPTERS)
    assert headings == [
        (1, "class BaseAdapter"), (2, "def close"), (1, "class HTTPAdapter"), (2, "def __init__"),
        (2, "def pool"), (2, "def send"), (1, "def helper"),
    ]
    assert title == "Transport adapters that keep connections to hosts."


def test_go_methods_name_their_receiver_and_title_skips_the_licence() -> None:
    headings, title = outline_of("mux.go", ROUTER_GO)
    assert headings == [(1, "type Router"), (1, "func Router.ServeHTTP"), (1, "func NewRouter")]
    assert title == "Package mux implements a request router and dispatcher."


def test_javascript_functions_classes_and_methods() -> None:
    headings, title = outline_of("application.js", APP_JS)
    assert headings == [(1, "function app.listen"), (1, "class Router"), (2, "constructor()"), (2, "handle()")]
    assert title == "application.js"  # a licence, then a two-word marker: the file's name


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("lib.rs", "//! Parsing of query strings.\nimpl<'a> Parser<'a> {\n    pub fn parse_query(&self) {\n    }\n}\n",
     [(1, "impl Parser<'a>"), (2, "fn parse_query")]),
    ("Adapter.java", "package x;\npublic class HTTPAdapter {\n    @Override\n    public Response send(Request r) throws IOException {\n"
     "        for (int i = 0; i < n; i++) {\n        }\n    }\n}\n", [(1, "class HTTPAdapter"), (2, "send()")]),
    ("main.c", "#include <stdio.h>\nstatic int\nmain(int argc, char **argv)\n{\n  if (argc)\n  {\n  }\n}\n", [(1, "main()")]),
    ("build.sh", "#!/bin/sh\n# Builds the thing for release.\nbuild() {\n  echo\n}\nfunction clean {\n}\n",
     [(1, "build()"), (1, "function clean")]),
    ("lint.rb", "module Rack\n  class Lint\n    def call(env)\n    end\n  end\nend\n",
     [(1, "module Rack"), (2, "class Lint"), (3, "def call")]),
])
def test_other_languages_by_keywords_and_indentation(name: str, text: str, expected: list[tuple[int, str]]) -> None:
    assert outline_of(name, text)[0] == expected


def test_titles_are_never_code_or_licence() -> None:
    assert outline_of("main.c", "#include <stdio.h>\nint x;\n")[1] == "main.c"
    assert outline_of("plain.py", "import os\nx = 1\n")[1] == "plain.py"
    assert outline_of("lic.js", "// Copyright 2020 ACME Inc.\n// SPDX-License-Identifier: MIT\nvar a = 1;\n")[1] == "lic.js"
    assert outline_of("build.sh", "#!/bin/sh\n# Builds the thing for release.\necho\n")[1] == "Builds the thing for release."
    module_name = '"""requests.adapters\n~~~~~~~~~~~~~~~~~\n\nThis module holds the adapters. More.\n"""\n'
    assert outline_of("adapters.py", module_name)[1] == "This module holds the adapters."


@pytest.mark.parametrize("name, text", [
    ("sum.js", "// return x + y;\nvar a = 1;\n"),
    ("calc.js", "// const value = compute(a, b);\nvar a = 1;\n"),
    ("err.go", "// if err != nil { return err }\npackage x\n"),
    ("hello.py", '# print("hello world", x)\nx = 1\n'),
    ("cache.py", "# self.cache.clear(key, value, now)\nx = 1\n"),
    ("imports.rb", "# require 'json' for the parser below\nx = 1\n"),
    ("owned.py", '"""Copyright 2020 ACME Inc. All rights reserved."""\nimport os\n'),
    ("apache.py", '"""Licensed under the Apache License, Version 2.0 (the "License")."""\nimport os\n'),
    ("spdx.py", '"""SPDX-License-Identifier: MIT OR Apache-2.0"""\nimport os\n'),
])
def test_a_title_is_prose_never_code_commented_out_nor_a_licence_docstring(name: str, text: str) -> None:
    assert outline_of(name, text)[1] == name


def test_prose_that_names_code_is_still_a_title() -> None:
    said = "Module containing bug report helper(s) for get_document(heading=...) on Python >= 3.12."
    assert outline_of("help.py", f'"""{said}"""\n')[1] == said
    assert outline_of("help.js", f"// {said}\nvar a = 1;\n")[1] == said


def test_python_that_does_not_parse_is_read_by_keywords() -> None:
    headings, title = outline_of("broken.py", "def broken(:\n    pass\nclass A:\n    def b(self): pass\n")
    assert headings == [(1, "def broken"), (1, "class A"), (2, "def b")]
    assert title == "broken.py"


def test_a_file_without_definitions_is_one_section(config: ServerConfig) -> None:
    content = text_content("x = 1\ny = 2\n", "consts.py")
    assert content.headings == [] and content.title == "consts.py"


@pytest.mark.parametrize(("name", "text"), [
    ("one_line.js", "a" * 10_000_000),
    ("braces.c", "{" * 100_000 + "\n" + "}" * 100_000),
    ("parens.py", "(" * 100_000),
    ("nested.py", "def f():\n" + "".join(" " * i + "if x:\n" for i in range(1, 2000)) + " " * 2000 + "pass\n"),
    ("words.java", ("int f(" + "a," * 100 + "\n") * 50_000),
    ("many.js", "\n".join(f"  f{i}(a) {{" for i in range(200_000))),
])
def test_hostile_code_is_bounded_and_never_an_error(name: str, text: str) -> None:
    started = time.process_time()
    headings, _ = code_outline.outline(f"\n{text}\n", name)
    assert time.process_time() - started < 5
    assert len(headings) <= code_outline.MAX_HEADINGS


@pytest.fixture
def code_config(config: ServerConfig) -> ServerConfig:
    return replace(config, included_extensions=(".py", ".go", ".js", ".md", ".rb"))


def scanned(config: ServerConfig) -> None:
    writer = IndexWriter(config.db_path)
    assert TextIndexer(config, writer).scan()["success"]
    writer.close()


def test_a_hit_names_the_definition_and_get_document_returns_exactly_it(code_config: ServerConfig, source: Path) -> None:
    write(source, "adapters.py", ADAPTERS)
    write(source, "mux.go", ROUTER_GO)
    write(source, "application.js", APP_JS)
    scanned(code_config)
    for query, path, heading, first_line in [
        ("walrus pooled connection", "adapters.py", "class HTTPAdapter > def send", "    def send(self, request):"),
        ("narwhal", "mux.go", "func Router.ServeHTTP", "func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {"),
        ("dispatchOstrich", "application.js", "class Router > handle()", "  handle(req, res, out) {"),
    ]:
        hit = search(code_config.db_path, query, 5)["results"][0]
        assert (hit["path"], hit["heading"]) == (path, heading)
        assert hit["title"] != first_line
        document = document_reply(code_config, path, heading=heading)
        assert document["text"].split("\n")[0] == first_line
        assert "def helper" not in document["text"] and "func NewRouter" not in document["text"]


def test_a_definition_past_the_outline_bound_is_returned_as_search_names_it(code_config: ServerConfig, source: Path) -> None:
    count = MAX_OUTLINE_HEADINGS + 500
    write(source, "many.py", "".join(f"def f{n}():\n    return {n}\n\n\n" for n in range(count)) + "def last_one():\n    return 'zebra'\n")
    scanned(code_config)
    hit = search(code_config.db_path, "zebra")["results"][0]
    assert hit["heading"] == "def last_one"
    reply = document_reply(code_config, "many.py", heading=hit["heading"], outline=True)
    assert reply["text"] == "def last_one():\n    return 'zebra'" and reply["line_start"] == 4 * count + 1
    assert reply["outline_truncated"] and len(reply["outline"]) <= MAX_OUTLINE_HEADINGS
    assert document_reply(code_config, "many.py", heading=f"def f{count - 1}")["text"].startswith(f"def f{count - 1}():")


SHAPES_RB = """\
# Shapes drawn on a canvas.
module Draw
  class Shape
    def area
      0
    end

    def name
      "shape"
    end
  end
end

def helper
  1
end
"""


def test_a_definition_ends_with_its_own_closing_line_not_its_holders(code_config: ServerConfig, source: Path) -> None:
    write(source, "shapes.rb", SHAPES_RB)
    write(source, "shapes.js", SHAPES_RB.replace("end", "}").replace("module Draw", "namespace Draw {").replace("class Shape", "class Shape {")
          .replace("def area", "area() {").replace("def name", "name() {").replace("def helper", "function helper() {"))
    assert document_reply(code_config, "shapes.rb", heading="def name")["text"] == '    def name\n      "shape"\n    end'
    assert document_reply(code_config, "shapes.rb", heading="class Shape")["text"].endswith('      "shape"\n    end\n  end')
    assert document_reply(code_config, "shapes.rb", heading="module Draw")["text"].endswith("  end\nend")
    assert document_reply(code_config, "shapes.js", heading="name()")["text"] == '    name() {\n      "shape"\n    }'
    outline = document_reply(code_config, "shapes.rb", outline=True)["outline"]
    assert [(entry["line_start"], entry["line_end"]) for entry in outline] == [(2, 12), (3, 11), (4, 6), (8, 10), (14, 16)]


def test_test_files_rank_below_the_code_they_test_unless_asked_for(code_config: ServerConfig, source: Path) -> None:
    write(source, "src/pool.py", '"""Connection pools."""\n\n\ndef drain_pool(pool):\n    """Drain the pool."""\n    pool.clear()\n')
    checks = "".join(f"\ndef test_drain_pool_{n}():\n    drain_pool(pool)\n    assert not pool\n" for n in range(8))
    write(source, "tests/test_pool.py", checks)
    write(source, "web/pool.spec.js", "it('drains', () => { drainPool(pool); drainPool(pool); drainPool(pool); });\n")
    scanned(code_config)
    assert [hit["path"] for hit in search(code_config.db_path, "drain pool", 5)["results"]][0] == "src/pool.py"
    assert [hit["path"] for hit in search(code_config.db_path, "drain pool tests", 5)["results"]][0] != "src/pool.py"


@given(st.lists(st.sampled_from(["tests", "Tests", "__tests__", "testing", "spec", "specs", "test_x", "conftest", "x_test", "XTests",
                                  "a.test", "b.spec", "src", "lib", "x", "_", ".", "py", "js", "Te", "st", "SPEC"]), min_size=1, max_size=5))
def test_every_test_path_holds_a_word_the_index_looks_for(pieces: list[str]) -> None:
    path = "/".join(pieces[:-1] + ["".join(pieces[-2:]) + ".py"])
    if search_module._TEST_PATH.search(path):
        assert any(word in path.lower() for word in search_module._TEST_PATH_WORDS), path


def test_getters_and_setters_are_told_apart() -> None:
    text = "module.exports = {\n  get header() {\n    return 1;\n  },\n\n  set header(val) {\n    this.x = val;\n  },\n};\n"
    assert outline_of("request.js", text)[0] == [(1, "get header()"), (1, "set header()")]


def test_each_definition_of_some_length_is_a_row_of_its_own() -> None:
    body = "".join(f"    step_{n} = compute_{n}(value)\n" for n in range(12))
    text = f"def first(value):\n{body}\n\ndef second(value):\n{body}\n\ndef tiny():\n    pass\n"
    rows = sections(text_content(text, "steps.py"))
    assert [row.heading for row in rows] == ["def first", "def second", "def tiny"]
    small = sections(text_content("def a():\n    pass\n\ndef b():\n    pass\n\ndef c():\n    pass\n", "small.py"))
    assert [row.heading for row in small] == ["def a"]  # short definitions share a row
    prose = sections(text_content(text.replace("def ", "# "), "steps.md"))
    assert len(prose) == 1


def test_python_definitions_under_if_try_and_with_are_found() -> None:
    text = ("try:\n    import fast\nexcept ImportError:\n    def fast():\n        pass\nelse:\n    def slow():\n        pass\n"
            "if True:\n    class Guarded:\n        def method(self):\n            x = [lambda: 1 for _ in range(2)]\n"
            "with open('x') as f:\n    def opened():\n        pass\n")
    assert outline_of("guarded.py", text)[0] == [(1, "def fast"), (1, "def slow"), (1, "class Guarded"), (2, "def method"), (1, "def opened")]
