"""The adapter follower and ``eval`` load adapters only through the store's one resolver (issue 24, finding 10):
the attack campaign's uris and names, sent as events / specs, are refusals with a reason and nothing is loaded or
written outside the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.config import LoopSettings, load
from streamgrpo.errors import ConfigError
from streamgrpo.evaluation.adapters import TargetError, parse_version, resolve
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.rollout.adapters import AdapterFollower


def _published(version: int, uri: str, sha: str, name: str = "planner") -> R.AdapterPublished:
    return R.AdapterPublished(envelope=R.Envelope.new("trainer"), adapter_name=name, version=version, uri=uri,
                              sha256=sha, base_model="in-process", trainer_step=version, lineage=[])


def _adapter(out: Path) -> str:
    import torch
    from peft import LoraConfig, get_peft_model

    from streamgrpo.models.adapter_store import sha256_dir

    base = build_tiny_model()
    torch.manual_seed(1)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)).save_pretrained(str(out))
    return sha256_dir(out)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[AdapterFollower, LocalPolicy, Path, Path, str]:
    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    sha = _adapter(outside)
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer(), keep_last=2)
    return AdapterFollower(policy, store_root=store, keep_last=2), policy, store, outside, sha


@pytest.mark.parametrize("uri", ["local://{outside}", "simplecache::file://{outside}"])
def test_fsspec_local_uris_do_not_copy_adapters_from_outside_the_store(setup, uri: str) -> None:
    follower, policy, store, outside, sha = setup
    follower.handle(_published(1, uri.format(outside=outside), sha))
    assert policy.resident_versions("planner") == [] and follower.refused_count == 1
    assert "not accepted" in follower.refusals[0].reason
    assert not (store / ".downloads").exists()  # nothing copied in


def test_symlinked_weights_in_the_store_are_refused(setup) -> None:
    """The swap window: an identical copy outside the store, linked from inside, verifies no more."""
    follower, policy, store, outside, sha = setup
    inside = store / "planner" / "v1"
    inside.mkdir(parents=True)
    for f in outside.iterdir():
        (inside / f.name).symlink_to(f) if f.name.endswith(".safetensors") else (inside / f.name).write_bytes(
            f.read_bytes())
    follower.handle(_published(1, str(inside), sha))
    assert policy.resident_versions("planner") == [] and "symlink" in follower.refusals[0].reason


def test_a_remote_announcement_cannot_name_a_download_directory_outside_the_store(setup, tmp_path: Path) -> None:
    follower, policy, store, _, sha = setup
    victim = tmp_path / "victim" / "v1"
    victim.mkdir(parents=True)
    (victim / "keep").write_text("x")
    follower.handle(_published(1, "s3://bucket/planner/v1", sha, name="../../victim"))
    assert follower.refused_count == 1 and "not a plain name" in follower.refusals[0].reason
    assert (victim / "keep").read_text() == "x"  # not removed by the download's clean-up


def test_eval_refuses_an_adapter_spec_that_is_a_path(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (tmp_path / "outside" / "v1").mkdir(parents=True)
    (tmp_path / "outside" / "v1" / "adapter_config.json").write_text("{}")
    with pytest.raises(TargetError, match="not a plain name"):
        parse_version("../outside@v1", "planner")
    with pytest.raises(TargetError, match="not a plain name"):
        resolve(["../outside@v1"], [], all_versions=False, include_base=False, adapter_name="planner", events=[],
                store_root=store)


@pytest.mark.parametrize("name", ["../../x", "a/b", ".."])
def test_loop_adapter_name_that_is_a_path_is_a_config_error(tmp_path: Path, name: str) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(f'[loop]\nadapter_name = "{name}"\n')
    with pytest.raises(ConfigError, match="adapter_name"):
        load(LoopSettings, "loop", path=toml, environ={})


def test_eval_refuses_an_announced_adapter_outside_its_store_and_says_how_to_name_the_store(setup) -> None:
    """A run's adapters sit in the run's own store, so `eval` without --run/--store meets them outside
    [loop] adapter_store: refused even with the right sha256, and the error says what to pass."""
    _, _, store, outside, sha = setup
    with pytest.raises(TargetError, match=r"outside the adapter store.*pass --run RUN_DIR or --store DIR"):
        resolve(["planner@v1"], [], all_versions=False, include_base=False, adapter_name="planner",
                events=[_published(1, str(outside), sha)], store_root=store)
    [target] = resolve(["planner@v1"], [], all_versions=False, include_base=False, adapter_name="planner",
                       events=[_published(1, str(outside), sha)], store_root=outside.parent)
    assert target.version == 1


def _in_store(store: Path, outside: Path, version: int) -> Path:
    """A copy of the adapter at ``outside`` as ``<store>/planner/v<version>``."""
    inside = store / "planner" / f"v{version}"
    inside.mkdir(parents=True)
    for f in outside.iterdir():
        (inside / f.name).write_bytes(f.read_bytes())
    return inside


def _absent_backend_scheme() -> str:
    import importlib.util

    for scheme, package in (("s3", "s3fs"), ("gs", "gcsfs"), ("az", "adlfs")):
        if importlib.util.find_spec(package) is None:
            return scheme
    pytest.skip("s3fs, gcsfs and adlfs are all installed: no remote scheme without its package to announce")


def test_a_remote_scheme_without_its_package_is_refused_and_the_follower_goes_on(setup) -> None:
    """s3:// without s3fs: fsspec raises ImportError, which escaped the follower and ended its task, so no later
    announcement was ever loaded (attack campaign re-run, finding 10)."""
    follower, policy, store, outside, sha = setup
    scheme = _absent_backend_scheme()
    follower.handle(_published(1, f"{scheme}://bucket/planner/v1", sha))
    assert follower.refused_count == 1 and "ImportError" in follower.refusals[0].reason
    follower.handle(_published(2, str(_in_store(store, outside, 2)), sha))
    assert policy.resident_versions("planner") == [2]


def test_a_remote_download_that_fails_is_retried_later_not_refused(setup) -> None:
    """A network failure (nothing listens on the port) is transient: listed as a failure, not a refusal, so a group
    that asks for the version tries again; the follower goes on."""
    from streamgrpo.topics.broker import free_port

    follower, policy, store, outside, sha = setup
    follower.handle(_published(1, f"http://127.0.0.1:{free_port()}/planner/v1/", sha))
    assert follower.refused_count == 0 and len(follower.failures) == 1
    assert "cannot download" in follower.failures[0].reason
    follower.handle(_published(2, str(_in_store(store, outside, 2)), sha))
    assert policy.resident_versions("planner") == [2]


def test_eval_refuses_an_unannounced_store_version_that_links_outside_the_store(setup) -> None:
    """`eval --adapter planner@v2 --store S` with no announcement reachable, where S/planner/v2 is a symlink to a
    directory outside S: it was accepted (with a note that it was not checked against an event) and loaded from
    outside the store; the rollout follower refuses the same layout (attack campaign re-run, finding 10)."""
    _, _, store, outside, _ = setup
    (store / "planner").mkdir()
    (store / "planner" / "v2").symlink_to(outside, target_is_directory=True)
    with pytest.raises(TargetError, match=r"planner@v2: .*outside the adapter store.*refusing to evaluate it"):
        resolve(["planner@v2"], [], all_versions=False, include_base=False, adapter_name="planner", events=None,
                store_root=store)
    _in_store(store, outside, 3)
    [target] = resolve(["planner@v3"], [], all_versions=False, include_base=False, adapter_name="planner",
                       events=None, store_root=store)
    assert target.version == 3 and target.path == (store / "planner" / "v3").resolve()
