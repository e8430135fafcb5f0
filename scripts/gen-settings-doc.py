#!/usr/bin/env python3
"""Write docs/settings.md from the server processes' *Options classes (the one place
each setting is stated); tests/unit/test_settings.py checks the file is current."""

from pathlib import Path

from hami_core.options import all_commands
from hami_core.settings import settings_markdown

if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
    out.write_text(settings_markdown(all_commands()), encoding="utf-8")
    print(f"wrote {out}")
