"""The README's reference tables say what the code does: every setting, with its default."""

from __future__ import annotations

import re
from pathlib import Path

from receipts.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def configuration_table() -> dict[str, str]:
    """The ``| `TOOLRELAY_X` | default | meaning |`` rows of the Configuration section: variable -> default."""
    section = README[README.index("## Configuration"):]
    section = section[:section.index("\n## ", 1)]
    return {name: default for name, default in re.findall(r"^\| `(TOOLRELAY_\w+)` \| ([^|]*) \|", section, re.M)}


def test_every_setting_is_in_the_configuration_table_and_nothing_else_is() -> None:
    documented = configuration_table()
    # Settings, and the dev command's option that reads the environment too.
    settings = {f"TOOLRELAY_{name.upper()}" for name in Settings.model_fields} | {"TOOLRELAY_DEV_API_KEY"}
    assert sorted(settings - documented.keys()) == []
    assert sorted(documented.keys() - settings) == []


def test_each_documented_default_is_the_settings_default() -> None:
    documented = configuration_table()
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        text = documented[f"TOOLRELAY_{name.upper()}"].strip()
        if isinstance(default, bool):
            expected = f"`{str(default).lower()}`"
        elif isinstance(default, list):
            expected = f"`{','.join(default)}`" if default else "empty"
        elif isinstance(default, float) and default.is_integer():
            expected = f"`{int(default)}`"
        elif default == "":
            expected = "empty"
        else:
            expected = f"`{default}`"
        assert text in (expected, "none"), f"TOOLRELAY_{name.upper()}: README says {text}, the default is {expected}"


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_within_the_readme_leads_to_one_of_its_headings() -> None:
    headings = {anchor(heading) for heading in re.findall(r"^#+ (.+)$", README, re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert links and sorted(links - headings) == []
