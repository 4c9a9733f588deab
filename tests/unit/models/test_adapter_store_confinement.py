"""The adapter store's one resolver confines every adapter path (issue 24, finding 10): names that are not one path
component, local / chained fsspec URLs, symlinks out of a version directory and an unwritable store are clear
errors, each sent as the attack campaign sent it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.tiny_model import tiny_model

from streamgrpo.errors import EXIT_MISCONFIGURED, ConfigError
from streamgrpo.models import adapter_store as store
from streamgrpo.models.errors import AdapterIntegrityError, AdapterStoreError, AdapterStoreUnwritableError
from streamgrpo.trainer.model import ModelSpec, attach_lora

SPEC = ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8, device="cpu")
ROOT = Path(__file__).resolve().parents[3]


def _manifest(name: str = "planner", version: int = 1) -> store.Manifest:
    return store.Manifest(adapter_name=name, version=version, parent_version=None, base_model="tiny", trainer_step=1)


@pytest.fixture(scope="module")
def model():
    return attach_lora(tiny_model(0)[0], SPEC)


@pytest.fixture
def stored(tmp_path: Path, model) -> tuple[Path, Path, str]:
    """(store root, v1 directory, its sha256) plus an identical copy outside the store at tmp_path/outside."""
    root = tmp_path / "store"
    path, sha = store.write_version(root, _manifest(), model)
    outside = tmp_path / "outside"
    outside.mkdir()
    for f in path.iterdir():
        (outside / f.name).write_bytes(f.read_bytes())
    return root, path, sha


@pytest.mark.parametrize("uri", ["local://{outside}", "simplecache::file://{outside}", "file://{outside}",
                                 "{outside}", "{root}/planner/../../outside", "memory://x", "ftp://host/x"])
def test_uris_outside_the_store_are_refused(stored, uri: str) -> None:
    root, _, sha = stored
    uri = uri.format(outside=root.parent / "outside", root=root)
    with pytest.raises(AdapterStoreError):
        store.verify_and_load_path(uri, sha, root)


def test_a_uri_inside_the_store_loads_as_its_real_path(stored) -> None:
    root, path, sha = stored
    assert store.verify_and_load_path(path.as_uri(), sha, root) == path.resolve()
    assert store.verify_and_load_path(str(path), sha, root) == path.resolve()


def test_a_version_directory_symlinking_out_of_the_store_does_not_verify(stored) -> None:
    """The verify-then-load swap window: weights symlinked to an identical (and swappable) copy outside."""
    root, path, sha = stored
    weights = path / "adapter_model.safetensors"
    weights.unlink()
    weights.symlink_to(root.parent / "outside" / "adapter_model.safetensors")
    with pytest.raises(AdapterIntegrityError, match="symlink"):
        store.verify_and_load_path(str(path), sha, root)
    link = root / "planner" / "v2"
    link.symlink_to(root.parent / "outside", target_is_directory=True)
    with pytest.raises(AdapterStoreError, match="outside the adapter store"):
        store.verify_and_load_path(str(link), sha, root)


@pytest.mark.parametrize("name", ["../../x", "../outside", "a/b", "", ".hidden", "x\x00y"])
def test_adapter_names_that_are_paths_are_refused(tmp_path: Path, model, name: str) -> None:
    with pytest.raises(AdapterStoreError, match="not a plain name"):
        store.write_version(tmp_path / "store", _manifest(name), model)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written anywhere, not even the store root


def test_a_store_root_that_is_a_file_is_a_config_error(tmp_path: Path, model) -> None:
    root = tmp_path / "store"
    root.write_text("not a directory")
    with pytest.raises(AdapterStoreUnwritableError) as info:
        store.write_version(root, _manifest(), model)
    assert isinstance(info.value, ConfigError) and "adapter_store" in str(info.value)


def test_a_read_only_store_is_a_config_error(tmp_path: Path) -> None:
    """A store on a read-only mount (bubblewrap binds it read-only: EROFS for every user, root included, as for a
    PVC mounted readOnly; a mode-0500 directory stops no root, so CI, which runs as root, skipped the older form of
    this test): the trainer's write is an AdapterStoreUnwritableError (a ConfigError) naming adapter_store."""
    root = tmp_path / "store"
    root.mkdir()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from support.tiny_model import tiny_model
        from streamgrpo.errors import ConfigError, EXIT_MISCONFIGURED
        from streamgrpo.models import adapter_store as store
        from streamgrpo.trainer.model import ModelSpec, attach_lora
        model = attach_lora(tiny_model(0)[0], ModelSpec(base_model="u", lora_rank=4, lora_alpha=8, device="cpu"))
        try:
            store.write_version({str(root)!r}, store.Manifest("planner", 1, None, "tiny", 1), model)
        except ConfigError as exc:
            print(type(exc).__name__, exc)
            sys.exit(EXIT_MISCONFIGURED)
    """)
    cmd = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(root), str(root), sys.executable, "-c", script]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == EXIT_MISCONFIGURED, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("AdapterStoreUnwritableError") and "adapter_store" in proc.stdout, proc.stdout
    assert "Read-only file system" in proc.stdout, proc.stdout
    assert not any(root.iterdir())


def test_a_full_store_exits_misconfigured_not_with_a_raw_safetensor_error(tmp_path: Path) -> None:
    """A store with no room (RLIMIT_FSIZE: every write past 64 KiB fails with EFBIG, as on a full disk): the
    trainer's write is an AdapterStoreUnwritableError (a ConfigError, exit 78), not a SafetensorError."""
    script = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from support.tiny_model import tiny_model
        from streamgrpo.errors import ConfigError, EXIT_MISCONFIGURED
        from streamgrpo.models import adapter_store as store
        from streamgrpo.trainer.model import ModelSpec, attach_lora
        model = attach_lora(tiny_model(0, hidden=256)[0], ModelSpec(base_model="u", lora_rank=64, lora_alpha=8,
                                                                     device="cpu"))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
        try:
            store.write_version({str(tmp_path / "store")!r},
                                store.Manifest("planner", 1, None, "tiny", 1), model)
        except ConfigError as exc:
            print(type(exc).__name__, exc)
            sys.exit(EXIT_MISCONFIGURED)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == EXIT_MISCONFIGURED, proc.stderr[-2000:]
    assert proc.stdout.startswith("AdapterStoreUnwritableError") and "adapter_store" in proc.stdout
    assert not list((tmp_path / "store" / "planner").iterdir())  # no half-written version left behind
