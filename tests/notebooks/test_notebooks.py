"""The analyst notebook runs headless, top to bottom, on the repository freeze, and shows its plots."""

from __future__ import annotations

from pathlib import Path

import pytest

from emmy_core.exchange.export import export_db
from emmy_core.exchange.importer import import_db

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "measurements_and_the_prior.py"


def run_notebook(path: Path, parameters: dict[str, object], cwd: Path) -> object:
    """Executes a Jupytext notebook with `parameters` set in a cell after its `parameters` cell."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in parameters.items())))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.fixture(scope="module")
def chain_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the chain leaves under _data/ for the notebook: the tuning database and its export."""
    data = tmp_path_factory.mktemp("data")
    assert all(o.ok for o in import_db(data / "tune.db", sorted((ROOT / "freezes").glob("*.json")), fresh=True))
    export_db(data / "tune.db", data / "dataset")
    return data


def test_the_notebook_runs_headless_on_the_repository_freeze(chain_data: Path) -> None:
    nb = run_notebook(NOTEBOOK, {"DATA": str(chain_data)}, ROOT)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]  # type: ignore[attr-defined]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # what tuning buys; where the prior is wrong
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", "")) for o in outputs)
    assert "pools have a fastest row" in text
    assert "Intel(R) Xeon(R) Processor AVX-512 x2" in text
    assert "slowdown" in text


def test_the_notebook_finds_the_chains_data_from_the_notebooks_folder(chain_data: Path, tmp_path: Path) -> None:
    """Jupyter starts a kernel in `notebooks/`: the default `_data` is read from the repository root."""
    import shutil

    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(NOTEBOOK, repo / "notebooks" / NOTEBOOK.name)
    shutil.copytree(chain_data, repo / "_data")
    nb = run_notebook(repo / "notebooks" / NOTEBOOK.name, {}, repo / "notebooks")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]  # type: ignore[attr-defined]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) == 2


def test_the_notebook_is_a_jupytext_percent_file_without_outputs() -> None:
    text = NOTEBOOK.read_text(encoding="utf-8")
    assert "format_name: percent" in text and "# %% tags=[\"parameters\"]" in text
    assert "read_only=True" in text
