"""Explorers show a static picture until the kernel runs: the widget's display carries the PNG
of its first drawing next to the live widget view, and a plain-text line instead of ``interactive(children=...``."""
import nbclient
import nbformat

from hybrid_lab.widgets.static import PLACEHOLDER, add_picture, first_png

VIEW = "application/vnd.jupyter.widget-view+json"


class _Fake:
    def __init__(self, outputs=(), children=()):
        self.outputs, self.children = outputs, children

    def _repr_mimebundle_(self, **kw):
        return {"text/plain": "interactive(children=(...))", VIEW: {"model_id": "x"}}


def test_first_png_prefers_recorded_displays_then_output_widgets():
    inner = _Fake(outputs=({"output_type": "display_data", "data": {"image/png": "B"}},))
    assert first_png(_Fake(children=(_Fake(), inner))) == "B"
    assert first_png(_Fake(children=(inner,)), recorded=[{"text/plain": "t"}, {"image/png": "A"}]) == "A"
    assert first_png(_Fake()) is None


def test_add_picture_keeps_the_view_and_replaces_the_repr():
    w = add_picture(_Fake(), "PNG")
    data = w._repr_mimebundle_()
    assert data["image/png"] == "PNG" and data[VIEW] == {"model_id": "x"} and data["text/plain"] == PLACEHOLDER
    plain = _Fake()
    assert add_picture(plain, None) is plain


def test_explorers_in_a_kernel_carry_their_first_picture(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in (
        "%matplotlib inline\nfrom hybrid_lab.widgets.basics import survival_explorer\nsurvival_explorer()",
        "from hybrid_lab.widgets.hysparse import ledger_slider\nledger_slider()")]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in nb.cells:
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert len(results) == 1, cell.outputs
        data = results[0].data
        assert data["image/png"] and VIEW in data and data["text/plain"] == PLACEHOLDER
