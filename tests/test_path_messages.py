"""No message shows an absolute path of the user's files: a file system error is told by its reason
and the file's last name, in replies, statuses and the command line; also when a file is swapped
between a file, a link and a FIFO while it is being read (the kernel then answers with errors that
name the whole path)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

import file_utils
from exceptions import UnsafePathError, reason_of
from tests.conftest import write
from tests.mcp_client import call, server_params, wait_for


def test_a_file_system_error_is_told_by_its_reason_and_the_files_last_name() -> None:
    assert reason_of(OSError(errno.EINVAL, "Invalid argument", "/home/me/src/x.md")) == "Invalid argument: x.md"
    assert reason_of(OSError(errno.EXDEV, "Cross-device link", "/a/b/", None, "/c/d")) == "Cross-device link: b -> d"
    assert reason_of(OSError(errno.EIO, "Input/output error")) == "Input/output error"
    assert reason_of(ValueError("plain")) == "plain"


def test_a_link_that_changes_while_a_path_is_looked_up_is_refused_without_the_path(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(source, "x.md", "# X\n")

    def racing(path: str) -> str:  # what os.readlink says when the link was swapped for a file meanwhile
        raise OSError(errno.EINVAL, "Invalid argument", str(source / "x.md"))

    real = os.path.realpath
    monkeypatch.setattr(file_utils.os.path, "realpath", lambda path, **kw: racing(path) if str(path).endswith("x.md") else real(path))
    with pytest.raises(UnsafePathError) as refused:
        file_utils.resolve_user_path(source, "x.md", source.parent / "idx")
    assert str(source) not in str(refused.value) and "changed while it was looked up" in str(refused.value)


@pytest.mark.anyio
async def test_replies_name_no_absolute_path_while_a_file_is_swapped_between_kinds(source: Path, tmp_path: Path) -> None:
    write(source, "x.md", "# X\n\nswapword here\n")
    write(source, "other.md", "# Other\n")
    # Swapped in another process, as fast as it can: a file, a link, a FIFO in turn.
    swapper = (
        "import os, sys\n"
        "os.chdir(sys.argv[1])\n"
        "while True:\n"
        "    for kind in ('file', 'link', 'fifo'):\n"
        "        try:\n"
        "            if kind == 'file':\n"
        "                open('x.tmp', 'w').write('# X\\n\\nswapword\\n')\n"
        "            elif kind == 'link':\n"
        "                os.symlink('other.md', 'x.tmp')\n"
        "            else:\n"
        "                os.mkfifo('x.tmp')\n"
        "            os.replace('x.tmp', 'x.md')\n"
        "        except OSError:\n"
        "            pass\n"
    )
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "0")) as client:
        async def idle() -> bool:
            return (await call(client, "get_index_status"))["state"] == "idle"

        await wait_for(idle)
        swapping = subprocess.Popen([sys.executable, "-c", swapper, str(source)])
        texts = []
        try:
            with anyio.fail_after(120):
                for n in range(300):
                    for tool, args in (("get_document", {"path": "x.md"}), ("refresh_index", {"filepath": "x.md"})):
                        result = await client.call_tool(tool, args)
                        texts.append(result.content[0].text)
        finally:
            swapping.kill()
            swapping.wait()
        status = await call(client, "get_index_status")
    leaked = [text for text in texts + [str(status.get("last_error"))] if str(tmp_path) in text]
    assert not leaked, leaked[:3]
