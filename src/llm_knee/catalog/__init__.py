"""Hardware, model architectures and dtypes shared by the planner and the simulator."""

from llm_knee.catalog.dtypes import DType, get_dtype, list_dtypes
from llm_knee.catalog.errors import CatalogError
from llm_knee.catalog.hardware import GpuSpec, get_gpu, list_gpus
from llm_knee.catalog.models import ModelSpec, get_model, list_models, load_hf_config

__all__ = [
    "CatalogError",
    "DType",
    "GpuSpec",
    "ModelSpec",
    "get_dtype",
    "get_gpu",
    "get_model",
    "list_dtypes",
    "list_gpus",
    "list_models",
    "load_hf_config",
]
