"""The front door (issue 16): the README opens with what the workbench does and a picture of
it, then the commands; ``make lab`` opens the quickstart notebook itself, not a folder.  No
browser here: these read the files the browser tests produce and the README shows."""

from __future__ import annotations

import re
import subprocess

from tests.browser.conftest import ROOT
from tests.browser.test_notebook7 import README_SHOT_LIMIT

SHOT = "docs/img/workbench.png"


def test_the_readme_opens_with_a_paragraph_and_the_workbench_screenshot():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    head = text[:text.index("```")]                 # everything before the first commands
    assert head.startswith("# kqlab\n\n")
    first = head.split("\n\n")[1]
    assert "Kafka" in first and len(first.split()) >= 25, first   # a paragraph, not a title
    images = re.findall(r"!\[([^\]]+)\]\(([^)]+)\)", head)
    assert [src for _alt, src in images] == [SHOT]
    assert len(images[0][0].split()) >= 5           # the alt text says what is shown
    commands = text[text.index("```sh"):]
    commands = commands[:commands.index("```\n", 5)]
    assert [line.split()[1] for line in commands.splitlines() if line.startswith("make ")] \
        == ["demo", "test", "lab"]


def test_the_screenshot_is_a_small_png():
    data = (ROOT / SHOT).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert 10_000 < len(data) < README_SHOT_LIMIT, len(data)
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 600 <= width <= 1400 and 300 <= height <= 900, (width, height)


def test_make_lab_opens_the_quickstart_notebook():
    out = subprocess.run(["make", "-n", "--no-print-directory", "lab"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    line = " ".join(out.split("\\\n")).split("jupyter lab", 1)[1]
    assert "--ip 127.0.0.1" in line
    url = re.search(r"--LabApp\.default_url=(\S+)", line)
    assert url is not None, line
    assert url.group(1) == "/lab/tree/01_quickstart.ipynb"
    assert "--notebook-dir notebooks" in line
    assert (ROOT / "notebooks" / "01_quickstart.ipynb").is_file()
