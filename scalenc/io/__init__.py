"""Data in and out: :func:`load` and :func:`check_xy` (inputs), :func:`write_output` and
:func:`write_dataset` (outputs, written atomically), and the readers, integrity checks and
atomic writer beneath them."""

from scalenc.io.devices import to_device
from scalenc.io.inputs import check_xy, load
from scalenc.io.outputs import write_dataset, write_output
from scalenc.io.tables import Table

__all__ = ["load", "check_xy", "to_device", "write_output", "write_dataset", "Table"]
