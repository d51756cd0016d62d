import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory):
    """Diffusers folders of the tiny SD3 / FLUX / Wan pipelines (random weights, built from configs)."""
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny_flow_models")
    return {name: save_tiny_pipeline(name, root / name) for name in ("sd3", "flux", "wan")}
