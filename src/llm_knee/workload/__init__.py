"""What to send: length distributions, prompts of exact token counts, prompt files.

Typical use::

    spec = WorkloadSpec(input_len=parse_length("512"), output_len=parse_length("256"), tokenizer="tok/")
    source = PromptSource(spec)          # validates tokenizer / prompt file; raises WorkloadError
    prompts = source.take(1000)          # or source.next()
"""

from llm_knee.workload.errors import PromptFileError, TokenizerError, WorkloadError
from llm_knee.workload.lengths import MAX_LENGTH, LengthDist
from llm_knee.workload.lengths import parse as parse_length
from llm_knee.workload.prompts import Prompt, PromptSource
from llm_knee.workload.spec import APIS, Api, WorkloadSpec
from llm_knee.workload.tokenizer import load_tokenizer

__all__ = [
    "APIS",
    "MAX_LENGTH",
    "Api",
    "LengthDist",
    "Prompt",
    "PromptFileError",
    "PromptSource",
    "TokenizerError",
    "WorkloadError",
    "WorkloadSpec",
    "load_tokenizer",
    "parse_length",
]
