"""Review of 4cec87f (#25): the .closed note vouches for "the file as this writer left it", but a
writer that opened a file nobody vouched for (damaged while no server ran, or left by a kill) and
closes before its start check ran or finished still writes the note. The next server then skips
the whole-index check for a file that was never checked: one short run (an MCP client opened and
closed within the ~100 s check at a million files) launders the damage."""

from __future__ import annotations

import os
from pathlib import Path

from database import IndexWriter
from models import ServerConfig
from tests.test_clean_close import closed_index, mark_of


def test_a_file_damaged_while_closed_is_not_vouched_for_by_a_run_that_never_checked_it(
    config: ServerConfig, source: Path
) -> None:
    db = closed_index(config, source)
    st = db.stat()
    with open(db, "r+b") as handle:  # damaged while no server ran: a tool, a sync client, a bad restore
        handle.seek(st.st_size - 64)
        handle.write(bytes(range(64)))
    short = IndexWriter(db)
    assert not short.closed_cleanly  # so this server would check it at start...
    short.close()  # ...but it is stopped before its check ran
    nxt = IndexWriter(db)
    try:
        assert not nxt.closed_cleanly, "a file never checked since its damage is trusted at the next start"
    finally:
        nxt.close()
