"""Prompt data: local files (JSONL, JSON, CSV, Parquet, ``datasets`` folders) and offline procedural generators."""

from genalign.data.chains import arithmetic_chain  # noqa: F401  (registers the procedural task 'arithmetic_chain')
from genalign.data.procedural import PROCEDURAL_TASKS, split_of
from genalign.data.shapes_edit import shapes_edit_rows  # noqa: F401  (registers the procedural task 'shapes_edit')
from genalign.data.sources import DataError, DataSourceConfig, load_rows
from genalign.data.video_tasks import shapes_video_rows  # noqa: F401  (registers the procedural task 'shapes_video')
from genalign.data.vlm_tasks import shapes_vqa_rows  # noqa: F401  (registers the procedural task 'shapes_vqa')

__all__ = ["PROCEDURAL_TASKS", "DataError", "DataSourceConfig", "load_rows", "split_of"]
